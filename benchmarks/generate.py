"""llmkit's generation loop next to Hugging Face transformers, measured in one run on this machine.

    python benchmarks/generate.py                # a few minutes on 2 CPU cores
    python benchmarks/generate.py --threads 1
    python benchmarks/generate.py --prompt-caching-only   # the 10-turn race alone

Prints, side by side and as ratios:
  * decode speed: llmkit ``generate`` vs ``GPT2LMHeadModel.generate`` on the same weights (CPU,
    float32, greedy, 16-token prompt, 256 new tokens) for a 6-layer 384-wide and a 4-layer 128-wide
    model (vocab 4096), and whether the tokens are identical;
  * the KV cache: tokens/s with and without it for 512 new tokens, for both libraries;
  * prefill vs decode: seconds per prompt token read in one pass vs per token generated;
  * prompt caching: a 10-turn conversation that re-sends its history every turn, time to first
    token with and without a ``PrefixCache``, and the share of input served from the cache, on the
    shipped base model (and, as its context is short, a random model of its shape with 1024 positions);
    then the ceiling: bare forward passes over the last prompt, whole and uncached part only; then
    turn 10 again with shorter user messages and longer replies (the same tokens per turn).
Timings are the best of a few repeats; on a shared, busy machine they still move by 10-30 % or more.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmkit.generation.generate import PrefixCache, generate  # noqa: E402
from llmkit.model.config import ModelConfig  # noqa: E402
from llmkit.model.fast import fast_path  # noqa: E402
from llmkit.model.transformer import Transformer  # noqa: E402
from llmkit.model.weights import from_hf  # noqa: E402
from llmkit.paths import DATA_DIR  # noqa: E402

PROMPT_LENGTH = 16


def race(runs: dict, repeats: int, cpu_times: dict | None = None) -> tuple[dict[str, float], dict]:
    """Best time of each named function over ``repeats`` rounds, taking turns within each round so
    that both sides see the same load on a shared machine; one warm-up call each. Returns the best
    seconds and the last result of each. With ``cpu_times`` (a dict), also fills in each one's best
    CPU time of this process: on a busy machine it leaves out the time spent waiting for a core."""
    results = {name: fn() for name, fn in runs.items()}  # warm-up
    best = dict.fromkeys(runs, float("inf"))
    best_cpu = dict.fromkeys(runs, float("inf"))
    for _ in range(repeats):
        for name, fn in runs.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            results[name] = fn()
            best[name] = min(best[name], time.perf_counter() - start)
            best_cpu[name] = min(best_cpu[name], time.process_time() - start_cpu)
    if cpu_times is not None:
        cpu_times.update(best_cpu)
    return best, results


def gpt2_pair(n_layers: int, d_model: int, n_heads: int, vocab_size: int = 4096, context: int = 1024):
    """A random Hugging Face GPT-2 and the same weights imported into llmkit."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=vocab_size, n_positions=context, n_embd=d_model, n_layer=n_layers,
                        n_head=n_heads, bos_token_id=0, eos_token_id=0)
    hf = GPT2LMHeadModel(config).eval()
    return hf, from_hf(hf)


def hf_generate(hf, prompt: torch.Tensor, new_tokens: int, use_cache: bool = True) -> list[int]:
    with torch.inference_mode():
        out = hf.generate(prompt, max_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                          pad_token_id=0, use_cache=use_cache)
    return out[0, prompt.size(1):].tolist()


def decode_speed(repeats: int) -> None:
    print("\n== Decode speed: greedy, 16-token prompt, 256 new tokens, float32, CPU ==")
    print(f"{'model':<22}{'HF tok/s':>10}{'llmkit tok/s':>14}{'llmkit / HF':>13}{'(CPU time)':>12}{'same tokens':>13}")
    for n_layers, d_model, n_heads, target in ((6, 384, 6, 1.4), (4, 128, 4, 3.0)):
        hf, ours = gpt2_pair(n_layers, d_model, n_heads)
        prompt = torch.randint(0, 4096, (1, PROMPT_LENGTH), generator=torch.Generator().manual_seed(1))
        cpu = {}
        times, out = race({"hf": lambda: hf_generate(hf, prompt, 256),
                           "llmkit": lambda: generate(ours, prompt, max_new_tokens=256).tokens}, repeats, cpu)
        hf_time, our_time = times["hf"], times["llmkit"]
        name = f"{n_layers} x {d_model}, vocab 4096"
        print(f"{name:<22}{256 / hf_time:>10.0f}{256 / our_time:>14.0f}{hf_time / our_time:>12.2f}x"
              f"{cpu['hf'] / cpu['llmkit']:>11.2f}x{str(out['llmkit'] == out['hf']):>13}   (target >= {target}x)")
    print("The ratio is the figure (both sides timed in turns, in one run); the CPU-time ratio leaves out\n"
          "waiting for a core, so on a busy machine it is the steadier of the two.")


def cache_speedup(repeats: int):
    """Tokens/s with and without the KV cache for 512 new tokens, for both libraries; returns the
    two models for the next measurement."""
    print("\n== KV cache: 6 x 384 model, 16-token prompt, 512 new tokens ==")
    print("(with the cache: best of the repeats; without it: one run each, as it is slow)")
    hf, ours = gpt2_pair(6, 384, 6)
    prompt = torch.randint(0, 4096, (1, PROMPT_LENGTH), generator=torch.Generator().manual_seed(2))
    runs = {"Hugging Face": lambda use_cache: hf_generate(hf, prompt, 512, use_cache=use_cache),
            "llmkit": lambda use_cache: generate(ours, prompt, max_new_tokens=512, use_cache=use_cache).tokens}
    cached_cpu = {}
    cached, cached_out = race({name: lambda run=run: run(True) for name, run in runs.items()}, repeats, cached_cpu)
    print(f"{'':<14}{'cache tok/s':>12}{'no cache tok/s':>16}{'speedup':>9}{'(CPU time)':>12}{'same tokens':>13}")
    speedup, speedup_cpu = {}, {}
    for name, run in runs.items():
        start, start_cpu = time.perf_counter(), time.process_time()
        uncached_out = run(False)
        uncached, uncached_cpu = time.perf_counter() - start, time.process_time() - start_cpu
        speedup[name], speedup_cpu[name] = uncached / cached[name], uncached_cpu / cached_cpu[name]
        print(f"{name:<14}{512 / cached[name]:>12.0f}{512 / uncached:>16.1f}{speedup[name]:>8.1f}x"
              f"{speedup_cpu[name]:>11.1f}x{str(uncached_out == cached_out[name]):>13}")
    print(f"llmkit's cache speedup / HF's: {speedup['llmkit'] / speedup['Hugging Face']:.2f} "
          f"(CPU time: {speedup_cpu['llmkit'] / speedup_cpu['Hugging Face']:.2f}; target >= 1)")
    cache = ours.new_cache()
    print(f"KV cache memory: {cache.nbytes // cache.max_length // 1024} KiB per token per request, "
          f"{cache.nbytes / 2**20:.0f} MiB for the full {cache.max_length}-token context")
    return ours, hf


def prefill_vs_decode(ours: Transformer, hf, repeats: int) -> None:
    print("\n== Prefill vs decode: 6 x 384 model, 512-token prompt ==")
    prompt = torch.randint(0, 4096, (1, 512), generator=torch.Generator().manual_seed(3))

    fast = fast_path(ours)  # what generate runs for an eval-mode model without hooks

    def llmkit_prefill():
        with torch.inference_mode():
            fast(prompt, cache=ours.new_cache(max_length=512), last_only=True)

    def hf_prefill():
        with torch.inference_mode():
            hf(prompt, use_cache=True, logits_to_keep=1)  # as llmkit's last_only=True

    short = prompt[:, :PROMPT_LENGTH]
    times, _ = race({"Hugging Face prefill": hf_prefill, "llmkit prefill": llmkit_prefill,
                     "Hugging Face decode": lambda: hf_generate(hf, short, 256),
                     "llmkit decode": lambda: generate(ours, short, max_new_tokens=256)}, repeats)
    print(f"{'':<14}{'prefill ms/token':>18}{'decode ms/token':>17}{'decode / prefill':>18}")
    for name in ("Hugging Face", "llmkit"):
        per_prompt_token, per_new_token = times[f"{name} prefill"] / 512, times[f"{name} decode"] / 256
        print(f"{name:<14}{per_prompt_token * 1e3:>18.3f}{per_new_token * 1e3:>17.3f}"
              f"{per_new_token / per_prompt_token:>17.0f}x")
    print("Input is read in parallel (one pass for all 512 tokens); output costs one pass per token.")


def conversation_models() -> list[tuple[Transformer, str]]:
    """The shipped base model if it is built, else a random 6 x 384 Llama. A model whose context is
    short (an older shipped one had 256 positions) is joined by a random model of the same width and
    depth with 1024 positions: with a short context the whole history stays small, and the fixed
    cost of one forward pass hides the saving."""
    if (DATA_DIR / "models" / "base" / "model.safetensors").exists():
        from llmkit import load_model

        model, where = load_model("base")[0], "the shipped base model"
    else:
        config = ModelConfig.llama(vocab_size=2048, context_length=1024, d_model=384, n_layers=6, n_heads=6,
                                   n_kv_heads=2)
        torch.manual_seed(0)
        model, where = Transformer(config).eval(), "a random 6 x 384 Llama, vocab 2048 (no shipped base model yet)"
    models = [(model, f"{where}, context {model.config.context_length}")]
    if model.config.context_length < 1024:
        config = dataclasses.replace(model.config, context_length=1024)
        torch.manual_seed(0)
        models.append((Transformer(config).eval(), "a random model of the same shape, with context 1024"))
    return models


def conversation(model: Transformer, words: torch.Tensor, reply: int, prefix_cache: PrefixCache | None) -> list:
    """Run the conversation once: each turn appends the user's words, re-sends the whole history
    and appends the reply. Returns each turn's ``Generation``."""
    history, results = [], []
    for user_words in words.tolist():
        history += user_words
        results.append(generate(model, history, max_new_tokens=reply, prefix_cache=prefix_cache))
        history += results[-1].tokens
    return results


def race_conversations(model: Transformer, user: int, reply: int, repeats: int, turns: int = 10):
    """Run a ``turns``-turn conversation (random user words, greedy replies) ``repeats`` times
    without and with a fresh PrefixCache, taking turns. Returns the words and both lists of runs."""
    words = torch.randint(0, model.config.vocab_size - 16, (turns, user), generator=torch.Generator().manual_seed(4))
    conversation(model, words[:2], reply, None)  # warm-up
    cold_runs, warm_runs = [], []
    for _ in range(repeats):  # in turns, so that both see the same load on a shared machine
        cold_runs.append(conversation(model, words, reply, None))
        warm_runs.append(conversation(model, words, reply, PrefixCache(max_bytes=256 * 2**20)))
    return words, cold_runs, warm_runs


def best_ttft(runs: list, turn: int) -> float:
    return min(run[turn].usage.time_to_first_token for run in runs)


def prompt_caching(model: Transformer, where: str, repeats: int, turns: int = 10) -> None:
    per_turn = (model.config.context_length - 16) // turns  # so that the last turn still fits
    reply = per_turn // 3
    user = per_turn - reply
    print(f"\n== Prompt caching: a {turns}-turn conversation, history re-sent every turn ==")
    print(f"model: {where}")
    print(f"{user} new user tokens and {reply} reply tokens per turn; time to first token (TTFT) is the best "
          f"of {repeats} runs of the whole conversation, each with a fresh PrefixCache")
    words, cold_runs, warm_runs = race_conversations(model, user, reply, repeats, turns)
    print(f"{'turn':>4}{'prompt':>8}{'from cache':>12}{'share':>8}{'TTFT cold ms':>14}{'TTFT cached ms':>16}"
          f"{'speedup':>9}{'same tokens':>13}")
    for turn in range(turns):
        cold, warm = best_ttft(cold_runs, turn), best_ttft(warm_runs, turn)
        usage = warm_runs[0][turn].usage
        same = cold_runs[0][turn].tokens == warm_runs[0][turn].tokens
        print(f"{turn + 1:>4}{usage.prompt_tokens:>8}{usage.cache_read_input_tokens:>12}"
              f"{usage.cache_read_input_tokens / usage.prompt_tokens:>8.0%}{cold * 1e3:>14.1f}{warm * 1e3:>16.1f}"
              f"{cold / warm:>8.1f}x{str(same):>13}")
    print(f"target: turn {turns} time to first token >= 5x lower with the cache")
    caching_ceiling(model, warm_runs[0], words, repeats)
    turn_shapes(model, per_turn, repeats, turns)


def turn_shapes(model: Transformer, per_turn: int, repeats: int, turns: int) -> None:
    """The same history length, split differently between the user's message and the reply.
    The cache serves everything but the new message, so the shorter the message, the larger
    the saving; what it cannot remove is the fixed cost of one forward pass."""
    print(f"turn {turns} with other splits of the {per_turn} tokens per turn:")
    print(f"{'user':>6}{'reply':>7}{'uncached':>10}{'TTFT cold ms':>14}{'TTFT cached ms':>16}{'speedup':>9}")
    for user in (per_turn // 3, max(1, per_turn // 6)):
        _, cold_runs, warm_runs = race_conversations(model, user, per_turn - user, repeats, turns)
        cold, warm = best_ttft(cold_runs, turns - 1), best_ttft(warm_runs, turns - 1)
        print(f"{user:>6}{per_turn - user:>7}{warm_runs[0][-1].usage.input_tokens:>10}{cold * 1e3:>14.1f}"
              f"{warm * 1e3:>16.1f}{cold / warm:>8.1f}x")


def caching_ceiling(model: Transformer, last_run: list, words: torch.Tensor, repeats: int) -> None:
    """Roughly the most prompt caching can gain on the last turn: one bare forward pass over the
    whole prompt against one over only the tokens the cache could not serve, with the rest already
    in the KV cache (no generate loop, no copying from the prefix cache). Even one token costs a
    pass that reads every weight, so a short new turn on a small model cannot get much below that
    fixed cost. (Timed apart from the table above, so a measured speedup can land a little above it.)"""
    history = []
    for user_words, turn in zip(words.tolist(), last_run):
        prompt = history + user_words
        history = prompt + turn.tokens
    cached = last_run[-1].usage.cache_read_input_tokens
    ids = torch.tensor([prompt])
    cache, fast = model.new_cache(1, max_length=len(prompt)), fast_path(model)  # the path generate takes
    with torch.inference_mode():
        fast(ids[:, :cached], cache=cache)

        def tail(start: int):
            cache.length = start
            return fast(ids[:, start:], cache=cache, last_only=True)

        times, _ = race({"whole prompt": lambda: tail(0), "new tokens only": lambda: tail(cached),
                         "one token": lambda: tail(len(prompt) - 1)}, max(repeats, 10))
    whole, new, one = times["whole prompt"], times["new tokens only"], times["one token"]
    print(f"bare forward passes on the last prompt: all {len(prompt)} tokens {whole * 1e3:.1f} ms, the "
          f"{len(prompt) - cached} uncached ones {new * 1e3:.1f} ms, the last one alone {one * 1e3:.1f} ms\n"
          f"  -> about {whole / new:.1f}x at best with any prefix cache; a one-token pass costs "
          f"{one / whole:.0%} of the whole prompt's")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per measurement (best is kept)")
    parser.add_argument("--prompt-caching-only", action="store_true",
                        help="only the 10-turn prompt-caching race on the shipped model (a minute or two)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {args.threads} CPU thread(s), "
          f"{os.cpu_count()} cores, load average {load}")
    transformers.logging.set_verbosity_error()
    if not args.prompt_caching_only:
        decode_speed(args.repeats)
        ours, hf = cache_speedup(args.repeats)
        prefill_vs_decode(ours, hf, args.repeats)
    for model, where in conversation_models():
        prompt_caching(model, where, args.repeats)


if __name__ == "__main__":
    main()
