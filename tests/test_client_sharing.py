"""The client under load: threads sharing one client, a long history dropped in one pass, and stop
sequences that never fire on the text of a control token."""
from __future__ import annotations

import random
import threading

import pytest
import torch

from llmkit.chat.client import Client
from llmkit.chat.context import fit_context, next_turn_start
from llmkit.chat.template import render
from llmkit.model.transformer import ModelConfig, Transformer
from llmkit.paths import data_path
from llmkit.tokens.tokenizer import Tokenizer
from scripted_model import ScriptedModel


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.load(data_path("models", "base", "tokenizer.json"))


def config(tokenizer, context_length: int = 256) -> ModelConfig:
    torch.manual_seed(0)
    return ModelConfig.llama(vocab_size=tokenizer.vocab_size, context_length=context_length, d_model=32,
                             n_layers=2, n_heads=2)


def question(number: int, thread: int) -> dict:
    return dict(messages=[{"role": "user", "content": f"A prefix all threads share, then question {number % 5}"
                                                      f" from thread {thread}."}],
                max_tokens=6, temperature=0.8, seed=number)


def test_threads_sharing_a_client_get_the_replies_they_would_get_alone(tokenizer):
    client = Client.from_model(Transformer(config(tokenizer)).eval(), tokenizer, prefix_cache_bytes=2**17)
    replies, errors = {}, []

    def work(thread: int) -> None:
        for number in range(12):
            try:
                replies[thread, number] = client.messages.create(**question(number, thread)).content
            except Exception as exc:  # collected, so the test shows every failure, not a hung thread
                errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(thread,)) for thread in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors and len(replies) == 48
    alone = Client.from_model(client.model, tokenizer)
    for (thread, number), content in replies.items():
        assert content == alone.messages.create(**question(number, thread), cache=False).content


def test_two_streams_read_in_turn_in_one_thread(tokenizer):
    client = Client.from_model(Transformer(config(tokenizer)).eval(), tokenizer)
    first, second = (client.messages.stream(**question(n, 0)) for n in (1, 2))
    items = {1: [], 2: []}
    for a, b in zip(first, second):  # would deadlock if a stream held the lock between tokens
        items[1].append(a)
        items[2].append(b)
    items[1] += list(first)
    items[2] += list(second)
    for n in (1, 2):
        assert items[n][-1].content == client.messages.create(**question(n, 0), cache=False).content


def conversation(rng: random.Random, turns: int) -> list[dict]:
    messages = []
    for turn in range(turns):
        messages.append({"role": "user", "content": "word " * rng.randint(1, 30)})
        if rng.random() < 0.3:
            call_id = f"toolu_{turn}"
            messages.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": call_id, "name": "lookup", "input": {"word": "x" * rng.randint(1, 20)}}]})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call_id, "content": "y " * rng.randint(1, 40)}]})
        messages.append({"role": "assistant", "content": "answer " * rng.randint(1, 20)})
    messages.append({"role": "user", "content": "the newest question"})
    return messages


def dropped_turn_by_turn(render_kept, messages: list[dict], window: int) -> list[dict]:
    """The reference: drop the oldest turn and render again, until the prompt fits."""
    while len(render_kept(messages)) > window - 1:
        messages = messages[next_turn_start(messages):]
    return messages


def test_drop_oldest_in_one_pass_keeps_exactly_what_turn_by_turn_dropping_keeps(tokenizer):
    rng = random.Random(0)
    system, tools = "Be brief.", [{"name": "lookup", "description": "Look a word up.",
                                   "input_schema": {"type": "object", "properties": {"word": {"type": "string"}},
                                                    "required": ["word"]}}]

    def render_kept(kept):
        return render(tokenizer, kept, tools=tools, system=system)

    for _ in range(25):
        messages, window = conversation(rng, rng.randint(1, 12)), rng.randint(40, 400)
        expected = dropped_turn_by_turn(render_kept, messages, window)
        kept, dropped, rendered = fit_context(render_kept, messages, window, "drop_oldest")
        assert kept == expected and dropped + kept == messages
        assert rendered.ids == render_kept(kept).ids and len(rendered) < window


def test_a_stop_sequence_never_fires_on_a_control_tokens_text(tokenizer):
    written = "<|thinking|>Let me think.<|end_thinking|>Thinking done.<|end_turn|>"
    model = ScriptedModel(config(tokenizer), tokenizer.encode(written, allowed_special="all")).eval()
    client = Client.from_model(model, tokenizer)
    request = dict(messages=[{"role": "user", "content": "hi"}], temperature=0, max_tokens=40)
    model.prompt_length = len(client.messages.render(messages=request["messages"]))
    for stop in ("ing|>", "<|end", "|>", "think.<|"):
        reply = client.messages.create(**request, stop_sequences=[stop])
        assert reply.stop_reason == "end_turn", stop
        assert reply.content == [{"type": "thinking", "thinking": "Let me think."},
                                 {"type": "text", "text": "Thinking done."}]
    reply = client.messages.create(**request, stop_sequences=["ing done"])  # text the model wrote still stops
    assert reply.stop_reason == "stop_sequence" and reply.content[-1] == {"type": "text", "text": "Think"}
