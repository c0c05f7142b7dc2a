"""How much continuous batching buys: aggregate output tokens/s of ``llmkit serve`` with 1, 2, 4, 8
and 16 concurrent streaming clients, against the same requests sent one at a time, in one run.

    python benchmarks/serve.py                 # the shipped chat model, 2 threads
    python benchmarks/serve.py --requests 32 --max-tokens 64 --rounds 5
    python benchmarks/serve.py --steps-only    # one bare decode pass per batch size: the ceiling

Also prints time to first token (p50/p95) under each load, and the KV memory a request held
(blocks x block size) against the pool and against a contiguous cache of the whole window.
The server runs as ``python -m llmkit serve`` in its own process (as it would in real life) and
the clients use the official ``anthropic`` SDK over HTTP, so the figures include the whole server.
At the end the server gets SIGTERM and must stop cleanly.
"""
from __future__ import annotations

import argparse
import statistics
import time

import anthropic
import httpx

from llmkit.course.serving import Load, run_concurrently, run_load
from llmkit.serve.command import ServerProcess

QUESTIONS = ["What is the weather in Pune?", "Count the letter r in strawberry.", "What is 17 times 23?",
             "Say hello to Asha.", "What does a KV cache store?", "Name three colours.", "Who wrote Hamlet?",
             "Is it raining in Mumbai?", "What is 9 plus 10?", "Spell 'banana' backwards.",
             "What is a token?", "Why is the sky blue?", "How many days are in a week?", "What is BPE?",
             "Tell me a short fact.", "What is 144 divided by 12?"]


def engine_only(args, questions: list[str]) -> None:
    """The same comparison without HTTP: the engine's own streams, in this process."""
    import torch

    from llmkit.chat.template import render
    from llmkit.model.weights import load_model
    from llmkit.serve.engine import Engine

    torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    engine = Engine(model, max_batch=16, kv_cache_mb=args.kv_cache_mb)
    prompts = [render(tokenizer, [{"role": "user", "content": q}]).ids for q in questions]

    def tokens_per_s(clients: int) -> float:
        def one(prompt) -> int:
            return sum(e.type == "token" for e in engine.stream(model, prompt, max_new_tokens=args.max_tokens))

        made, seconds = run_concurrently(prompts, clients, one)
        return sum(made) / seconds

    tokens_per_s(8)  # warm up
    alone = tokens_per_s(1)
    print(f"\nthe engine alone (no HTTP, greedy, same prompts): one at a time {alone:.1f} tokens/s")
    for clients in (2, 4, 8, 16):
        speed = tokens_per_s(clients)
        print(f"{clients:>8} streams {speed:>9.1f} tokens/s {speed / alone:>6.2f}x")
    engine.close()


def step_scaling(args) -> None:
    """The ceiling batching can reach: one bare paged decode pass (``paged_forward``, no HTTP, no
    choosing, no streams) for batches of 1 to 16 rows, each row 40 tokens into its reply; with the
    weights as stored (``F.linear``) and packed for oneDNN (``llmkit.serve.packed``, what the engine
    runs), side by side."""
    import torch

    from llmkit.model.fast import FastModel, plain_linear
    from llmkit.model.weights import load_model
    from llmkit.serve.packed import packed_linear
    from llmkit.serve.paged import BlockPool, Reads, paged_forward

    model, _ = load_model(args.model)
    model.eval()
    pool = BlockPool.of_size(model.config, args.kv_cache_mb)
    paths = {"F.linear": FastModel(model, plain_linear), "packed": FastModel(model, packed_linear)}
    torch.set_num_threads(args.threads)
    print(f"\none bare decode pass (median of 40), {args.threads} thread(s); x: tokens/s against one row "
          f"with F.linear")
    print(f"{'rows':>8} " + " ".join(f"{name:>22}" for name in paths))
    alone = None
    with torch.inference_mode():
        for batch in (1, 2, 4, 8, 16):
            tables = [[pool.allocate() for _ in range(pool.blocks_for(90))] for _ in range(batch)]
            cells = []
            for fast in paths.values():
                paged_forward(fast, pool, Reads.of([(list(range(5, 45)), 0, t) for t in tables], pool.block_size))
                times = []
                for step in range(40):
                    reads = Reads.of([([7], 40 + step, t) for t in tables], pool.block_size)
                    started = time.perf_counter()
                    paged_forward(fast, pool, reads)
                    times.append(time.perf_counter() - started)
                step_s = statistics.median(times)
                alone = alone or 1 / step_s
                cells.append(f"{step_s * 1000:6.2f} ms {batch / step_s / alone:5.2f}x")
            print(f"{batch:>8} " + " ".join(f"{cell:>22}" for cell in cells))
            for table in tables:
                pool.release(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="chat")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3, help="times each load level runs; medians are shown")
    parser.add_argument("--kv-cache-mb", type=float, default=64.0)
    parser.add_argument("--engine-only", action="store_true", help="also time the engine without HTTP")
    parser.add_argument("--steps-only", action="store_true",
                        help="only time one bare decode pass per batch size (the ceiling of batching)")
    args = parser.parse_args()
    if args.steps_only:
        step_scaling(args)
        return
    questions = [QUESTIONS[i % len(QUESTIONS)] + " " * (i // len(QUESTIONS)) for i in range(args.requests)]
    server = ServerProcess("--no-auth", "--model", args.model, "--threads", str(args.threads), "--max-batch", "16",
                           "--kv-cache-mb", str(args.kv_cache_mb))
    url = server.url
    try:
        model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        client = anthropic.Anthropic(base_url=url, api_key="none", max_retries=0, timeout=600)
        run_load(client, model, questions, 8, args.max_tokens)  # warm up (and fill the prompt cache)
        print(f"{args.requests} requests, max_tokens={args.max_tokens}, model {args.model}, server threads "
              f"{args.threads}; {args.rounds} rounds, each level once per round, medians shown (a shared "
              f"machine: single runs vary by 10% or more)\n")
        levels = [1, 2, 4, 8, 16]  # 1: the requests one at a time, each waiting for the last
        loads: dict[int, list] = {level: [] for level in levels}
        for _ in range(args.rounds):  # interleaved, so a slow spell of the machine hits every level
            for level in levels:  # timed without polling /v1/stats
                loads[level].append(run_load(client, model, questions, level, args.max_tokens))
        alone = statistics.median(load.tokens_per_s for load in loads[1])
        print(f"{'clients':>8} {'tokens/s':>9} {'vs one at a time':>17} {'TTFT p50':>9} {'TTFT p95':>9}  rounds")
        for level in levels:
            speeds = [load.tokens_per_s for load in loads[level]]
            first = Load.pooled(loads[level])  # every round's first tokens, for the percentiles
            print(f"{level:>8} {statistics.median(speeds):>9.1f} {statistics.median(speeds) / alone:>16.2f}x "
                  f"{first.median_first_token_s * 1000:>7.0f}ms {first.first_token_percentile(0.95) * 1000:>7.0f}ms  "
                  + " ".join(f"{speed / alone:.2f}x" for speed in speeds))
        print(f"{'':>8} (rounds: each round's tokens/s against the median of one client at a time)")
        with httpx.Client() as http:  # one more pass at 8 clients, sampling the blocks each request holds
            seen = run_load(client, model, questions, 8, args.max_tokens,
                            stats=lambda: http.get(url + "/v1/stats").json()).blocks_per_request
        kv = httpx.get(url + "/v1/stats").json()["kv_blocks"]
        per_block = kv["pool_mib"] / kv["total"]
        window = httpx.get(url + "/v1/models").json()["data"][0]["context_window"]
        if seen:
            print(f"\nKV memory per running request: mean {statistics.mean(seen) * per_block:.2f} MiB, "
                  f"max {max(seen) * per_block:.2f} MiB ({max(seen)} blocks of {kv['block_size']} tokens); "
                  f"a contiguous cache of the whole window: {window / kv['block_size'] * per_block:.2f} MiB; "
                  f"pool: {kv['pool_mib']:.1f} MiB ({kv['total']} blocks)")
    finally:
        server.stop()
        print(f"\nSIGTERM: the server finished and stopped (exit status {server.process.returncode}: uvicorn "
              f"re-raises the signal once it has drained)")
    if args.engine_only:
        engine_only(args, questions)
        step_scaling(args)


if __name__ == "__main__":
    main()
