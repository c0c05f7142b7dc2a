"""Server tools: the client runs web_search inside one create call (the reply carries the call and its
result, stop_reason is not "tool_use"); client tools still end the turn. A ScriptedModel writes
exactly the tokens the chat template gives the whole assistant turn, so every check is exact."""
from __future__ import annotations

import json

import pytest
import torch

from llmkit.course import conversations as conv
from llmkit.course import conversation_data as data
from llmkit.chat.template import render, server_result_ids
from llmkit.chat.client import MAX_SERVER_CALLS, SERVER_LIMIT_ERROR, Client
from llmkit.model.transformer import ModelConfig
from llmkit.model.weights import read_config
from llmkit.paths import data_path
from llmkit.chat.tools import run_tool_call, tool
from llmkit.course.tools import get_weather, web_search
from llmkit.chat.trace import Trace
from scripted_model import ScriptedModel

pytestmark = pytest.mark.usefixtures("one_thread")

QUESTION = [{"role": "user", "content": "What is the monsoon like in Pune?"}]
QUERY = {"query": "monsoon in Pune"}
THINKING = {"type": "thinking", "thinking": "I'll search the documents."}
CONTEXT = read_config(data_path("models", "chat")).context_length  # the course model's context length


def search_result(call_id: str, query: dict = QUERY) -> dict:
    outcome = run_tool_call([web_search], "web_search", query, tool_use_id=call_id)
    return {"type": "server_tool_result", "tool_use_id": call_id, "content": outcome["content"],
            "is_error": outcome["is_error"]}


def server_use(call_id: str, query: dict = QUERY, name: str = "web_search") -> dict:
    return {"type": "server_tool_use", "id": call_id, "name": name, "input": query}


def scripted_client(tokenizer, messages, turn: list[dict], tools, context: int = CONTEXT) -> tuple[Client, list[int]]:
    """A client whose model writes ``turn`` (an assistant message's blocks) as the template renders it.

    The script is every id after the prompt: the model's own tokens, and, where the client
    prefills a server tool's result and the next header, the same ids (never read: those
    positions are prefilled, not generated). Returns the client and the full rendered ids."""
    prompt = render(tokenizer, messages, tools=tools)
    full = render(tokenizer, messages + [{"role": "assistant", "content": turn}], tools=tools,
                  add_generation_prompt=False)
    if turn[-1]["type"] == "tool_use":  # a client call ends the turn at <|end_tool_call|>
        full = render(tokenizer, messages + [{"role": "assistant", "content": turn}, {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": turn[-1]["id"], "content": "x"}]}], tools=tools,
            add_generation_prompt=False)
    torch.manual_seed(0)
    config = ModelConfig.llama(vocab_size=tokenizer.vocab_size, context_length=context, d_model=32, n_layers=2,
                               n_heads=2)
    model = ScriptedModel(config, full.ids[len(prompt):], len(prompt)).eval()
    return Client.from_model(model, tokenizer), full.ids


def without_ids(blocks: list[dict]) -> list[dict]:
    return [{k: v for k, v in b.items() if k not in ("id", "tool_use_id")} for b in blocks]


# ---------------------------------------------------------------------------------------------- one search
def test_a_server_call_runs_inside_create_and_the_reply_carries_it(tokenizer):
    answer = json.loads(search_result("s")["content"])["Pune, India"]
    turn = [THINKING, server_use("s"), search_result("s"), {"type": "text", "text": answer}]
    client, ids = scripted_client(tokenizer, QUESTION, turn, [web_search])
    reply = client.messages.create(messages=QUESTION, tools=[web_search], max_tokens=200, temperature=0, cache=False)

    assert reply.stop_reason == "end_turn" and reply.text == answer
    assert [b["type"] for b in reply.content] == ["thinking", "server_tool_use", "server_tool_result", "text"]
    assert without_ids(reply.content) == without_ids(turn)
    use, result = reply.content[1], reply.content[2]
    assert result["tool_use_id"] == use["id"] and use["id"].startswith("srvtoolu_")
    assert reply.usage.server_tool_calls == 1

    # usage: both prompts were read in full (no cache), and every generated token is output
    prompt = len(client.messages.render(messages=QUESTION, tools=[web_search]))
    result_ids = server_result_ids(tokenizer, result)
    answer_ids = tokenizer.encode(answer) + [tokenizer.special_tokens["<|end_turn|>"]]
    second_prompt = len(ids) - len(answer_ids)
    assert reply.usage.input_tokens == prompt + second_prompt and reply.usage.cache_read_input_tokens == 0
    assert reply.usage.output_tokens == len(ids) - prompt - len(result_ids)
    thinking_ids = tokenizer.encode("<|thinking|>I'll search the documents.<|end_thinking|>", allowed_special="all")
    assert reply.usage.thinking_tokens == len(thinking_ids)
    # the bill: every token, plus the fee for the one search ($0.01), thinking split out of the output
    assert reply.cost == pytest.approx((reply.usage.input_tokens * 2 + reply.usage.output_tokens * 10) / 1e6 + 0.01)
    assert reply.bill.server_tool_calls == 1 and reply.bill.thinking_tokens == reply.usage.thinking_tokens

    # re-sent as history, the reply renders to exactly the tokens the model read and wrote
    history = QUESTION + [reply.to_param()]
    assert render(tokenizer, history, tools=[web_search], add_generation_prompt=False).ids == ids
    assert client.conversations[reply.id][2] == history
    follow_up = client.messages.render(messages=history + [{"role": "user", "content": "Thanks!"}], tools=[web_search])
    assert follow_up.ids[:len(ids)] == ids


def test_with_the_prompt_cache_the_second_round_reads_the_first_from_it(tokenizer):
    answer = "It rains from June to September."
    turn = [server_use("s"), search_result("s"), {"type": "text", "text": answer}]
    client, ids = scripted_client(tokenizer, QUESTION, turn, [web_search])
    cold = client.messages.create(messages=QUESTION, tools=[web_search], max_tokens=200, temperature=0, cache=False)
    warm = client.messages.create(messages=QUESTION, tools=[web_search], max_tokens=200, temperature=0)
    assert without_ids(cold.content) == without_ids(warm.content) == without_ids(turn)
    assert warm.usage.cache_read_input_tokens > 0
    assert (warm.usage.input_tokens + warm.usage.cache_read_input_tokens
            == cold.usage.input_tokens + cold.usage.cache_read_input_tokens)
    assert warm.usage.output_tokens == cold.usage.output_tokens


def test_streaming_a_server_call_labels_each_piece(tokenizer):
    turn = [THINKING, server_use("s"), search_result("s"), {"type": "text", "text": "Rain, June to September."}]
    client, _ = scripted_client(tokenizer, QUESTION, turn, [web_search])
    *deltas, reply = list(client.messages.stream(messages=QUESTION, tools=[web_search], max_tokens=200,
                                                 temperature=0))
    types = {d.index: d.type for d in deltas}
    assert types == {0: "thinking", 1: "server_tool_use", 2: "server_tool_result", 3: "text"}
    assert all(reply.content[d.index]["type"] == d.type for d in deltas)
    joined = {i: "".join(d.text for d in deltas if d.index == i) for i in types}
    assert joined[0] == "I'll search the documents." and joined[3] == reply.text
    assert joined[1].startswith('{"name": "web_search"')
    assert joined[2] == reply.content[2]["content"]


def test_the_trace_shows_both_rounds_and_the_search(tokenizer):
    turn = [server_use("s"), search_result("s"), {"type": "text", "text": "Rain, June to September."}]
    client, _ = scripted_client(tokenizer, QUESTION, turn, [web_search])
    trace = Trace()
    reply = client.messages.create(messages=QUESTION, tools=[web_search], max_tokens=200, temperature=0, trace=trace)
    (call,) = trace.of_kind("tool_call")
    assert call.data["server"] and call.data["name"] == "web_search" and call.data["input"] == QUERY
    assert call.duration >= 0 and not call.data["is_error"]
    (result,) = trace.of_kind("tool_result")
    assert result.data["content"] == reply.content[1]["content"] and result.data["tokens"] > 0
    prefills, answers = trace.of_kind("prefill"), trace.of_kind("answer")
    assert len(prefills) == len(answers) == 2
    assert [a.data["stop_reason"] for a in answers] == ["tool_use", "end_turn"]
    assert sum(a.data["output_tokens"] for a in answers) == reply.usage.output_tokens
    assert sum(p.data["input_tokens"] for p in prefills) == reply.usage.input_tokens
    assert prefills[0].t <= answers[0].t <= call.t <= prefills[1].t <= answers[1].t
    assert [b.data["bill"] for b in trace.of_kind("bill")] == [reply.bill]


# ---------------------------------------------------------------------------------------------- client tools
def test_a_client_tool_still_ends_the_turn_with_tool_use(tokenizer):
    weather = {"type": "tool_use", "id": "toolu_x", "name": "get_weather", "input": {"city": "Pune", "day": "today"}}
    client, _ = scripted_client(tokenizer, QUESTION, [THINKING, weather], [web_search, get_weather])
    reply = client.messages.create(messages=QUESTION, tools=[web_search, get_weather], max_tokens=200, temperature=0)
    assert reply.stop_reason == "tool_use" and reply.usage.server_tool_calls == 0
    assert without_ids(reply.content) == without_ids([THINKING, weather])


def test_a_search_then_a_client_call_in_one_reply(tokenizer):
    weather = {"type": "tool_use", "id": "toolu_x", "name": "get_weather", "input": {"city": "Pune", "day": "today"}}
    turn = [server_use("s"), search_result("s"), weather]
    client, _ = scripted_client(tokenizer, QUESTION, turn, [web_search, get_weather], context=512)
    reply = client.messages.create(messages=QUESTION, tools=[web_search, get_weather], max_tokens=200, temperature=0)
    assert reply.stop_reason == "tool_use"
    assert [b["type"] for b in reply.content] == ["server_tool_use", "server_tool_result", "tool_use"]
    # the harness answers the client call as usual, and the history renders
    answer = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": reply.content[-1]["id"],
                                           "content": "sunny"}]}
    assert client.messages.render(messages=QUESTION + [reply.to_param(), answer], tools=[web_search, get_weather])


def test_a_server_tool_passed_as_a_definition_is_a_client_tool(tokenizer):
    call = {"type": "tool_use", "id": "toolu_x", "name": "web_search", "input": QUERY}
    client, _ = scripted_client(tokenizer, QUESTION, [call], [web_search])
    reply = client.messages.create(messages=QUESTION, tools=[web_search.definition()], max_tokens=200, temperature=0)
    assert reply.stop_reason == "tool_use" and reply.content[-1]["type"] == "tool_use"


# ---------------------------------------------------------------------------------------------- limits and errors
def test_at_most_max_server_calls_run_then_calls_are_refused(tokenizer):
    n = MAX_SERVER_CALLS + 1
    turn = []
    for i in range(n):
        result = search_result(f"s{i}") if i < MAX_SERVER_CALLS else {
            "type": "server_tool_result", "tool_use_id": f"s{i}", "content": SERVER_LIMIT_ERROR, "is_error": True}
        turn += [server_use(f"s{i}"), result]
    turn.append({"type": "text", "text": "Rain."})
    client, ids = scripted_client(tokenizer, QUESTION, turn, [web_search], context=1024)  # four results
    assert len(ids) < 1024
    reply = client.messages.create(messages=QUESTION, tools=[web_search], max_tokens=250, temperature=0)
    assert reply.stop_reason == "end_turn" and reply.text == "Rain."
    results = [b for b in reply.content if b["type"] == "server_tool_result"]
    assert [r["is_error"] for r in results] == [False] * MAX_SERVER_CALLS + [True]
    assert results[-1]["content"] == SERVER_LIMIT_ERROR and reply.usage.server_tool_calls == MAX_SERVER_CALLS
    assert render(tokenizer, QUESTION + [reply.to_param()], tools=[web_search], add_generation_prompt=False).ids == ids


def test_server_tool_failures_are_error_results_not_exceptions(tokenizer):
    @tool(server=True)
    def lookup(query: str) -> str:
        """Look something up (always fails).

        Args:
            query: What to look up.
        """
        raise RuntimeError("the index is down")

    failing = {"type": "server_tool_result", "tool_use_id": "a", "content": "lookup failed: RuntimeError: the index "
               "is down", "is_error": True}
    bad_args = {"type": "server_tool_result", "tool_use_id": "b", "is_error": True,
                "content": run_tool_call([web_search], "web_search", {"q": "Pune"}, tool_use_id="b")["content"]}
    turn = [server_use("a", name="lookup"), failing, server_use("b", {"q": "Pune"}), bad_args,
            {"type": "text", "text": "Sorry."}]
    client, _ = scripted_client(tokenizer, QUESTION, turn, [lookup, web_search])
    reply = client.messages.create(messages=QUESTION, tools=[lookup, web_search], max_tokens=200, temperature=0,
                                   constrain_tools=False)  # let the model write arguments that don't fit the schema
    assert reply.stop_reason == "end_turn" and reply.text == "Sorry."
    assert without_ids(reply.content) == without_ids(turn)


def test_max_tokens_is_a_budget_for_the_whole_request(tokenizer):
    turn = [server_use("s"), search_result("s"), {"type": "text", "text": "It rains from June to September."}]
    client, ids = scripted_client(tokenizer, QUESTION, turn, [web_search])
    prompt = len(client.messages.render(messages=QUESTION, tools=[web_search]))
    call_tokens = ids[prompt:].index(tokenizer.special_tokens["<|end_tool_call|>"]) + 1
    spent = client.messages.create(messages=QUESTION, tools=[web_search], max_tokens=call_tokens, temperature=0)
    assert spent.stop_reason == "max_tokens" and spent.usage.output_tokens == call_tokens
    assert [b["type"] for b in spent.content] == ["server_tool_use", "server_tool_result"]  # run, never read
    short = client.messages.create(messages=QUESTION, tools=[web_search], max_tokens=call_tokens + 3, temperature=0)
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == call_tokens + 3


# ---------------------------------------------------------------------------------------------- template
def test_server_blocks_render_as_a_call_a_result_and_a_new_header(tokenizer):
    turn = [THINKING, server_use("s"), search_result("s"), {"type": "text", "text": "Rain."}]
    server = render(tokenizer, QUESTION + [{"role": "assistant", "content": turn}], tools=[web_search],
                    add_generation_prompt=False)
    client_style = QUESTION + [
        {"role": "assistant", "content": [THINKING, {"type": "tool_use", "id": "s", "name": "web_search",
                                                     "input": QUERY}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "s",
                                      "content": search_result("s")["content"]}]},
        {"role": "assistant", "content": "Rain."}]
    client = render(tokenizer, client_style, tools=[web_search], add_generation_prompt=False)
    assert (server.ids, server.mask, server.roles) == (client.ids, client.mask, client.roles)  # one message vs three
    trained = [tokenizer.decode(server.ids[a:b]) for a, b in server.assistant_spans()]
    assert trained[0].endswith("<|end_tool_call|>") and trained[1] == "Rain.<|end_turn|>"


@pytest.mark.parametrize("content, message", [
    ([{"type": "server_tool_use", "id": "s", "name": "web_search", "input": QUERY}], "without a server_tool_result"),
    ([{"type": "server_tool_result", "tool_use_id": "s", "content": "x"}], "does not follow a server_tool_use"),
    ([{"type": "server_tool_use", "id": "s", "name": "web_search", "input": QUERY},
      {"type": "server_tool_result", "tool_use_id": "t", "content": "x"}], "answers the call right before it"),
    ([{"type": "server_tool_use", "id": "s", "name": "web_search", "input": QUERY},
      {"type": "text", "text": "hm"}], "without a server_tool_result"),
])
def test_malformed_server_blocks_are_clear_errors(tokenizer, content, message):
    with pytest.raises(ValueError, match=message):
        render(tokenizer, QUESTION + [{"role": "assistant", "content": content}])


# ---------------------------------------------------------------------------------------------- the "search" kind
def search_conversations():
    every_heldout = [conv.search_conversation(q, query, doc, thinking=max(conv.SEARCH_THINKING, key=len),
                                              system=max(data.SYSTEM_PROMPTS, key=lambda s: len(s or "")),
                                              split="heldout")
                     for q, query, doc in conv.search_questions("heldout")]
    return every_heldout + conv.make_conversations(500, split="train", seed=0, kinds=["search"])


def test_search_conversations_fit_the_context(tokenizer):
    lengths = [len(c.render(tokenizer)) for c in search_conversations()]
    assert max(lengths) <= CONTEXT
    # and the worst case of every train question too: longest system prompt and thinking
    for question, query, doc in conv.search_questions("train"):
        c = conv.search_conversation(question, query, doc, thinking=max(conv.SEARCH_THINKING, key=len),
                                     system=max(data.SYSTEM_PROMPTS, key=lambda s: len(s or "")))
        assert len(c.render(tokenizer)) <= CONTEXT, question


def test_search_conversations_copy_the_query_and_answer_from_the_top_hit():
    for c in search_conversations():
        question = c.messages[0]["content"]
        thinking, use, result, text = c.messages[1]["content"]
        assert use["name"] == "web_search" and result == search_result(use["id"], use["input"]) | {"type": "server_tool_result"}
        query_words = use["input"]["query"].lower().split()
        assert all(word in question.lower() for word in query_words)  # the query is copied from the question
        hits = json.loads(result["content"])
        assert next(iter(hits)) == c.expected.facts["title"] and text["text"] == hits[c.expected.facts["title"]]
        assert c.expected.tool == "web_search" and c.expected.answer_values == (text["text"],)
        assert c.prompt == c.messages[:1]
        assert "ignore your previous instructions" not in result["content"].lower()


def test_search_splits_use_disjoint_documents():
    questions = {split: conv.search_questions(split) for split in data.SPLITS}
    documents = {split: {doc for _, _, doc in questions[split]} for split in data.SPLITS}
    assert not documents["train"] & documents["heldout"]
    assert set(conv.SEARCH_CITIES["heldout"]) <= set(data.CITIES["heldout"])
    assert not set(conv.SEARCH_CITIES["train"]) & set(data.CITIES["heldout"])
    heldout_titles = {conv.course_index().document(doc).title for doc in documents["heldout"]}
    for question, query, doc in questions["train"]:  # a held-out note is never read in training, even as a 2nd hit
        c = conv.search_conversation(question, query, doc)
        assert not set(json.loads(c.messages[1]["content"][2]["content"])) & heldout_titles, question
    for c in conv.make_conversations(100, split="train", seed=1, kinds=["search"]):
        assert c.split == "train" and c.expected.facts["document"] in documents["train"]
    assert {c.kind for c in conv.make_conversations(6, kinds=["search", "weather"])} == {"search", "weather"}
    assert "search" not in conv.KINDS
