"""llmkit.course.profiling: the timing helpers return one measurement per token or length, and the
conversation runner reports exact cache accounting. A tiny random model keeps the tests fast;
only properties of timings are checked (they vary), while token counts are checked exactly."""
from __future__ import annotations

import pytest

from llmkit.generation.generate import PrefixCache
from llmkit.model.config import estimate_cost
from llmkit.chat.client import Client
from llmkit.course.profiling import (context_costs, median_time_to_first_token, prefill_vs_decode, read_costs,
                                     replay_chat, replay_conversation, token_times)
from llmkit.generation.sampling import SamplingParams

MESSAGES = ["ROMEO.\nGood morrow, fair Juliet.\n\nJULIET.\n", "ROMEO.\nWhy dost thou weep?\n\nJULIET.\n",
            "ROMEO.\nFarewell, sweet love.\n\nJULIET.\n"]


@pytest.fixture(scope="module")
def model(tokenizer, tiny_llama):
    return tiny_llama(tokenizer.vocab_size, context_length=128)


@pytest.mark.parametrize("use_cache", [True, False])
def test_token_times_gives_one_positive_time_per_token(model, use_cache):
    times = token_times(model, [1, 2, 3, 4], 10, use_cache=use_cache)
    assert len(times) == 10 and all(t > 0 for t in times)


def test_prefill_vs_decode_reports_per_token_costs(model):
    cost = prefill_vs_decode(model, list(range(40)), n_tokens=5, repeats=2)
    assert (cost.prompt_tokens, cost.output_tokens) == (40, 5)
    assert cost.prefill_s > 0 and cost.decode_s_per_token > 0
    assert cost.prefill_s_per_token == pytest.approx(cost.prefill_s / 40)
    assert cost.decode_over_prefill == pytest.approx(cost.decode_s_per_token / cost.prefill_s_per_token)


def test_prefill_vs_decode_rejects_what_cannot_run(model):
    with pytest.raises(ValueError, match="does not fit"):
        prefill_vs_decode(model, list(range(120)), n_tokens=20)
    with pytest.raises(ValueError, match="at least 2"):
        prefill_vs_decode(model, [1, 2, 3], n_tokens=1)


def test_context_costs_memory_is_exactly_linear(model):
    costs = context_costs(model, list(range(100)), [8, 32, 100], repeats=1)
    per_token = estimate_cost(model.config).kv_cache_bytes_per_token
    assert [c.tokens for c in costs] == [8, 32, 100]
    assert [c.kv_cache_bytes for c in costs] == [8 * per_token, 32 * per_token, 100 * per_token]
    assert all(c.prefill_s > 0 for c in costs)
    with pytest.raises(ValueError, match="fewer than the longest"):
        context_costs(model, list(range(10)), [20])


def test_read_costs_reads_exactly_the_uncached_tokens(model):
    prompt = list(range(3, 103))
    costs = read_costs(model, prompt, [1, 17, 100], repeats=2)
    assert [(c.read_tokens, c.cached_tokens) for c in costs] == [(1, 99), (17, 83), (100, 0)]
    assert all(c.time_to_first_token > 0 for c in costs)
    for bad in (0, 101):
        with pytest.raises(ValueError, match="between 1 and the prompt's 100 tokens"):
            read_costs(model, prompt, [bad])


def test_replay_conversation_resends_history_and_counts_cache_reads(model, tokenizer):
    cache = PrefixCache(max_bytes=2**22, block_size=8)
    turns, history = replay_conversation(model, tokenizer, MESSAGES, prefix_cache=cache, max_new_tokens=6)
    assert [t.turn for t in turns] == [1, 2, 3]
    assert turns[0].usage.cache_read_input_tokens == 0 and turns[0].usage.prompt_tokens == len(tokenizer.encode(MESSAGES[0]))
    for before, turn, message in zip(turns, turns[1:], MESSAGES[1:]):
        # the whole previous prompt and its reply come back, plus the new message
        assert turn.usage.prompt_tokens == before.usage.prompt_tokens + before.usage.output_tokens + len(tokenizer.encode(message))
        assert turn.usage.cache_read_input_tokens + turn.usage.input_tokens == turn.usage.prompt_tokens
        # everything sent before is reused but the reply's last token (drawn, never fed back)
        assert turn.usage.cache_read_input_tokens == before.usage.prompt_tokens + before.usage.output_tokens - 1
        assert turn.usage.time_to_first_token > 0
    assert len(history) == turns[-1].usage.prompt_tokens + turns[-1].usage.output_tokens
    plain, plain_history = replay_conversation(model, tokenizer, MESSAGES, max_new_tokens=6)
    assert [t.reply for t in plain] == [t.reply for t in turns] and plain_history == history
    assert all(t.usage.cache_read_input_tokens == 0 for t in plain)


def test_replay_conversation_with_sampling_is_reproducible(model, tokenizer):
    hot = SamplingParams(temperature=1.5)
    first = replay_conversation(model, tokenizer, MESSAGES, sampling=hot, seed=3, max_new_tokens=6)[1]
    again = replay_conversation(model, tokenizer, MESSAGES, sampling=hot, seed=3, max_new_tokens=6)[1]
    other = replay_conversation(model, tokenizer, MESSAGES, sampling=hot, seed=4, max_new_tokens=6)[1]
    assert first == again and first != other


def test_replay_chat_continues_the_stored_conversation(model, tokenizer):
    said = ["My name is Ada.", "Who wrote Hamlet?", "Thank you!"]
    create = dict(system="Be brief.", max_tokens=4, temperature=0)
    cached = replay_chat(Client.from_model(model, tokenizer), said, **create)
    client = Client.from_model(model, tokenizer)
    plain = replay_chat(client, said, cache=False, **create)
    assert [r.text for r in cached] == [r.text for r in plain] and [r.number for r in plain] == [1, 2, 3]
    assert len(client.conversations[plain[-1].id][2]) == 2 * len(said)  # every question and reply, stored
    for before, row in zip(plain, plain[1:]):  # each request re-sends the one before it, and its reply
        assert row.prompt_tokens > before.prompt_tokens + before.usage.output_tokens - 1
    assert all(r.usage.cache_read_input_tokens == 0 for r in plain)
    assert all(r.usage.cache_read_input_tokens > 0 for r in cached[1:])
    assert len(median_time_to_first_token([cached, plain])) == 3
