"""The continuous-batching engine and its paged KV pool: the paged forward equals the model's, greedy
output is token for token the same alone, in a batch of eight and through ``generate``, the prompt
cache shares blocks, and blocks come back when a request stops, is cancelled or cannot fit."""
from __future__ import annotations

import threading

import pytest
import torch

from llmkit.generation.generate import generate
from llmkit.generation.sampling import SamplingParams
from llmkit.model.fast import FastModel, plain_linear
from llmkit.model.transformer import ModelConfig, Transformer
from llmkit.paths import DATA_DIR
from llmkit.serve.engine import Engine, NotServable, Overloaded, RequestTooLarge, pick_tokens
from llmkit.serve.packed import packed_linear
from llmkit.serve.paged import BlockPool, Reads, block_bytes, paged_forward
from llmkit.serve.sequence import RequestContext, Sequence

pytestmark = pytest.mark.usefixtures("one_thread")
CHAT_WEIGHTS = DATA_DIR / "models" / "chat" / "model.safetensors"


def sharp_model(family: str, vocab: int = 300, context: int = 64) -> Transformer:
    """A tiny random model whose logits are spread wide, so greedy choices are not near-ties that
    rounding could flip (a freshly initialised model scores every token almost the same)."""
    torch.manual_seed(0)
    config = getattr(ModelConfig, family)(vocab_size=vocab, context_length=context, d_model=32, n_layers=2,
                                          n_heads=4)
    model = Transformer(config).eval()
    with torch.no_grad():
        model.embed.weight.mul_(40)
    return model


def prompts(count: int, vocab: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, vocab, (3 + 5 * i,), generator=generator).tolist() for i in range(count)]


def tokens(engine: Engine, prompt: list[int], **options) -> list[int]:
    return [e.token for e in engine.stream(engine.model, prompt, **options) if e.type == "token"]


def concurrently(engine: Engine, all_prompts: list[list[int]], **options) -> list[list[int]]:
    out: list = [None] * len(all_prompts)

    def run(i):
        out[i] = tokens(engine, all_prompts[i], **options)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(all_prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return out


@pytest.mark.parametrize("linear", [plain_linear, packed_linear], ids=["plain", "packed"])
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_paged_forward_equals_the_model_in_blocks_prefill_and_decode(family, linear):
    model = sharp_model(family)
    pool = BlockPool(model.config, 16, block_size=4)
    ids = torch.randint(0, 300, (1, 11), generator=torch.Generator().manual_seed(2))
    table = [5, 2, 9]  # blocks anywhere in the pool, in table order
    with torch.inference_mode():
        expected = model(ids)[0]
        prefill = paged_forward(FastModel(model, linear), pool, Reads.of([(ids[0, :7].tolist(), 0, table)], 4))
        torch.testing.assert_close(prefill[0], expected[6], atol=1e-4, rtol=1e-4)
        for position in range(7, 11):
            step = paged_forward(FastModel(model, linear), pool, Reads.of([([int(ids[0, position])], position, table)], 4))
            torch.testing.assert_close(step[0], expected[position], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("linear", [plain_linear, packed_linear], ids=["plain", "packed"])
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_one_pass_can_mix_decode_rows_with_prompts_of_any_length(family, linear):
    """A decoding row, a whole prompt and a prompt after cached blocks, read in one pass, each give
    the logits the model gives that sequence alone."""
    model = sharp_model(family)
    pool = BlockPool(model.config, 32, block_size=4)
    generator = torch.Generator().manual_seed(3)
    texts = [torch.randint(0, 300, (n,), generator=generator).tolist() for n in (9, 6, 13)]
    tables = [[0, 1, 2], [7, 3], [4, 5, 6, 8]]
    fast = FastModel(model, linear)
    with torch.inference_mode():
        expected = [model(torch.tensor([text]))[0, -1] for text in texts]
        # beforehand: row 0 has all but its last token in its blocks, row 2 its first two blocks
        paged_forward(fast, pool, Reads.of([(texts[0][:8], 0, tables[0]), (texts[2][:8], 0, tables[2])], 4))
        reads = Reads.of([(texts[0][8:], 8, tables[0]), (texts[1], 0, tables[1]), (texts[2][8:], 8, tables[2])], 4)
        logits = paged_forward(fast, pool, reads)
    for row, want in enumerate(expected):
        torch.testing.assert_close(logits[row], want, atol=1e-4, rtol=1e-4)


def test_a_row_that_reads_nothing_is_refused():
    with pytest.raises(ValueError, match="reads no token"):
        Reads.of([([1], 0, [0]), ([], 3, [1])], 4)


class GatedEngine(Engine):
    """An engine that takes no request until ``gate`` is set, and records what each pass reads."""

    def __init__(self, *args, **kwargs):
        self.gate, self.reads = threading.Event(), []
        super().__init__(*args, **kwargs)

    def _take_inbox(self, wait: bool) -> None:
        self.gate.wait()
        super()._take_inbox(wait)

    def _step(self, batch: list[Sequence]) -> None:
        self.reads.append([len(sequence.unread()) for sequence in batch])
        super()._step(batch)


def test_prompts_admitted_together_are_read_in_one_pass_then_one_token_per_row_per_pass():
    model = sharp_model("llama")
    batch = prompts(8, 300)
    reference = [generate(model, p, max_new_tokens=6).tokens for p in batch]
    engine = GatedEngine(model, max_batch=8, kv_cache_mb=1, block_size=4)
    try:
        streams = [engine.stream(model, p, max_new_tokens=6) for p in batch]  # all queued before the gate opens
        engine.gate.set()
        replies = [[e.token for e in stream if e.type == "token"] for stream in streams]
    finally:
        engine.gate.set()
        engine.close()
    assert replies == reference
    assert engine.reads == [[len(p) for p in batch]] + [[1] * 8] * 5  # six passes for six tokens each


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_greedy_output_is_the_same_alone_in_a_batch_of_eight_and_through_generate(family):
    model = sharp_model(family)
    engine = Engine(model, max_batch=8, kv_cache_mb=1, block_size=4)
    try:
        batch = prompts(8, 300)
        reference = [generate(model, p, max_new_tokens=12).tokens for p in batch]
        alone = [tokens(engine, p, max_new_tokens=12) for p in batch]
        together = concurrently(engine, batch, max_new_tokens=12)
        assert alone == reference
        assert together == reference
        assert engine.stats()["kv_blocks"]["used"] == 0  # every block came back
    finally:
        engine.close()


@pytest.mark.skipif(not CHAT_WEIGHTS.exists(), reason="the chat model is not trained yet")
def test_shipped_chat_model_greedy_alone_equals_batch_of_eight(tokenizer):
    from llmkit.chat.template import render
    from llmkit.model.weights import load_model

    model, tokenizer = load_model("chat")
    questions = ["What is the weather in Pune?", "Count the r in strawberry.", "What is 12 times 7?",
                 "Say hello.", "What is a KV cache?", "Name a colour.", "Who wrote Hamlet?", "Is it raining?"]
    batch = [render(tokenizer, [{"role": "user", "content": q}]).ids for q in questions]
    engine = Engine(model, max_batch=8, kv_cache_mb=16)
    try:
        alone = [tokens(engine, p, max_new_tokens=16) for p in batch]
        assert concurrently(engine, batch, max_new_tokens=16) == alone
        assert alone[0] == generate(model, batch[0], max_new_tokens=16).tokens
    finally:
        engine.close()


def test_a_batch_mixing_plain_greedy_banned_tokens_and_sampling_gives_each_its_own_reply():
    model = sharp_model("gpt2")
    engine = Engine(model, max_batch=8, kv_cache_mb=1, block_size=4)
    try:
        batch = prompts(8, 300)
        plain = [tokens(engine, p, max_new_tokens=8) for p in batch]
        banned = [{row[0]} for row in plain]  # each one's own first greedy token
        kinds = [dict(), dict(suppress_tokens=banned[1]), dict(sampling=SamplingParams(temperature=3.0), seed=5),
                 dict(), dict(suppress_tokens=banned[4]), dict(), dict(sampling=SamplingParams(top_k=5), seed=9),
                 dict()]
        alone = [tokens(engine, p, max_new_tokens=8, **kind) for p, kind in zip(batch, kinds)]
        together: list = [None] * 8

        def run(i):
            together[i] = tokens(engine, batch[i], max_new_tokens=8, **kinds[i])

        threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert together == alone
        for i in (0, 3, 5, 7):
            assert alone[i] == plain[i]
        for i in (1, 4):
            assert not banned[i] & set(alone[i]) and alone[i] != plain[i]
    finally:
        engine.close()


def make_sequence(params: SamplingParams, suppressed=None) -> Sequence:
    return Sequence([1, 2], max_new_tokens=4, context_length=64, params=params, seed=0, end_turn=frozenset(),
                    tool_use=frozenset(), tokenizer=None, stop_sequences=(), suppressed=suppressed, constraint=None,
                    context=RequestContext(), deadline=1e18, device="cpu")


def test_pick_tokens_takes_each_rows_argmax_and_a_row_with_nothing_to_draw_fails_alone():
    greedy = SamplingParams()
    suppressed = torch.zeros(6, dtype=torch.bool)
    suppressed[2] = True
    batch = [make_sequence(greedy), make_sequence(greedy, suppressed), make_sequence(greedy), make_sequence(greedy)]
    logits = torch.tensor([[0., 1, 5, 2, 0, 0], [0., 1, 5, 2, 0, 0], [9., 1, 5, 2, 0, 0], [0., 1, 5, 2, 0, 7]])
    assert pick_tokens(batch, logits) == [2, 3, 0, 5]
    logits[2] = float("nan")
    picks = pick_tokens(batch, logits)
    assert picks[:2] == [2, 3] and picks[3] == 5
    assert isinstance(picks[2], ValueError) and "rules out every token" in str(picks[2])


def test_a_model_with_a_forward_hook_is_refused_with_the_reason():
    model = sharp_model("llama")
    handle = model.blocks[0].register_forward_hook(lambda module, args, out: None)
    with pytest.raises(NotServable, match="'blocks.0' has a forward hook"):
        Engine(model, kv_cache_mb=1)
    handle.remove()
    Engine(model, kv_cache_mb=1).close()


def test_decode_threads_must_be_a_whole_number():
    with pytest.raises(ValueError, match="decode_threads must be a whole number >= 1"):
        Engine(sharp_model("llama"), kv_cache_mb=1, decode_threads=0)


def test_seeded_sampling_is_the_same_alone_and_in_a_batch():
    model = sharp_model("llama")
    engine = Engine(model, max_batch=8, kv_cache_mb=1, block_size=4)
    try:
        batch = prompts(6, 300)
        options = dict(max_new_tokens=10, sampling=SamplingParams(temperature=5.0), seed=3)
        alone = [tokens(engine, p, **options) for p in batch]
        assert concurrently(engine, batch, **options) == alone
        assert all(0 <= t < 300 for row in alone for t in row)
    finally:
        engine.close()


def test_prompt_cache_shares_blocks_across_requests_and_changes_nothing():
    model = sharp_model("llama")
    engine = Engine(model, max_batch=4, kv_cache_mb=1, block_size=4)
    try:
        prompt = prompts(4, 300)[3]  # 18 tokens: four full blocks
        first = list(engine.stream(model, prompt, max_new_tokens=5))
        second = list(engine.stream(model, prompt, max_new_tokens=5))
        assert [e.token for e in first[:-1]] == [e.token for e in second[:-1]]
        assert first[-1].generation.usage.cache_read_input_tokens == 0
        assert second[-1].generation.usage.cache_read_input_tokens == 16
        assert second[-1].generation.usage.input_tokens == len(prompt) - 16
        assert engine.stats()["prompt_cache"]["hits"] == 1
    finally:
        engine.close()


def test_a_reader_that_leaves_gives_its_blocks_back_at_once():
    model = sharp_model("llama")
    engine = Engine(model, max_batch=4, kv_cache_mb=1, block_size=4)
    try:
        events = engine.stream(model, prompts(2, 300)[1], max_new_tokens=40)
        next(events), next(events)
        assert engine.stats()["running"] == 1 and engine.stats()["kv_blocks"]["used"] > 0
        events.close()
        for _ in range(200):
            if engine.stats()["running"] == 0:
                break
            threading.Event().wait(0.01)
        stats = engine.stats()
        assert stats["running"] == 0 and stats["kv_blocks"]["used"] == 0
        assert stats["requests"]["cancelled"] == 1
    finally:
        engine.close()


def test_a_request_waits_for_blocks_and_one_that_can_never_fit_is_refused():
    model = sharp_model("llama")
    six_blocks = 6 * block_bytes(model.config, 4) / 2**20  # room for one 19-position request at a time
    engine = Engine(model, max_batch=8, kv_cache_mb=six_blocks, block_size=4)
    try:
        assert engine.pool.num_blocks == 6
        batch = [p[:8] for p in prompts(4, 300)[1:]]
        results = concurrently(engine, batch, max_new_tokens=12)
        assert results == [generate(model, p, max_new_tokens=12).tokens for p in batch]
        with pytest.raises(RequestTooLarge, match="--kv-cache-mb"):
            engine.stream(model, batch[0], max_new_tokens=30)
    finally:
        engine.close()


def test_a_full_queue_refuses_at_once():
    model = sharp_model("llama")
    engine = Engine(model, max_batch=1, max_waiting=1, kv_cache_mb=1, block_size=4)
    try:
        with engine._lock:  # hold the engine's door so nothing leaves the queue while we fill it
            engine._queued = 1
        with pytest.raises(Overloaded, match="waiting"):
            engine.stream(model, [1, 2, 3], max_new_tokens=2)
        with engine._lock:
            engine._queued = 0
        assert len(tokens(engine, [1, 2, 3], max_new_tokens=2)) == 2
    finally:
        engine.close()


def test_a_request_past_its_time_limit_ends_with_a_timeout_and_frees_everything():
    from llmkit.serve.sequence import RequestTimeout

    model = sharp_model("llama")
    engine = Engine(model, max_batch=2, kv_cache_mb=1, block_size=4, request_timeout_s=0.0)
    try:
        with pytest.raises(RequestTimeout, match="limit"):
            tokens(engine, [1, 2, 3], max_new_tokens=5)
        stats = engine.stats()
        assert stats["requests"]["timed_out"] == 1 and stats["waiting"] == 0 and stats["kv_blocks"]["used"] == 0
    finally:
        engine.close()
