"""``llmkit serve`` over HTTP, driven by the official ``anthropic`` and ``openai`` packages (and raw
HTTP for the protocol's edges): replies and streams in each API's shape, tool round trips, typed
errors, rate limits, a burst that gets only answers or clean refusals, and a client that leaves."""
from __future__ import annotations

import concurrent.futures
import json
import shutil
import signal
import subprocess
import sys
import time

import anthropic
import httpx
import openai
import pytest
import torch

from llmkit.model.transformer import ModelConfig, Transformer
from llmkit.paths import DATA_DIR
from llmkit.serve.command import BackgroundServer, build_state, is_loopback, main as serve_main
from llmkit.serve.app import ServerLimits

pytestmark = pytest.mark.usefixtures("one_thread")
KEY, MODEL = "sk-test-1", "tiny"
CHAT_WEIGHTS = DATA_DIR / "models" / "chat" / "model.safetensors"
GREEDY = {"temperature": 0}
ASK = [{"role": "user", "content": "Will it rain in Pune?"}]
WEATHER = {"name": "get_weather", "description": "Current weather for a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def tiny_model(tokenizer) -> Transformer:
    torch.manual_seed(0)
    config = ModelConfig.llama(vocab_size=tokenizer.vocab_size, context_length=1024, d_model=32, n_layers=2, n_heads=2)
    return Transformer(config).eval()


@pytest.fixture(scope="module")
def server(tokenizer):
    state = build_state(tiny_model(tokenizer), tokenizer, model_id=MODEL, keys=[KEY], kv_cache_mb=4,
                        limits=ServerLimits(max_body_bytes=50_000, max_tools=4))
    with BackgroundServer(state) as running:
        yield running


@pytest.fixture
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0, timeout=60)


@pytest.fixture
def gpt(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=60)


def stats(server) -> dict:
    return httpx.get(server.url + "/v1/stats", headers={"x-api-key": KEY}).json()


def test_anthropic_message_and_stream_agree_and_count_usage(claude, server):
    reply = claude.messages.create(model=MODEL, max_tokens=8, messages=ASK, system="Be brief.", extra_body=GREEDY)
    assert reply.type == "message" and reply.role == "assistant" and reply.model == MODEL
    assert reply.stop_reason in ("end_turn", "max_tokens") and reply.usage.output_tokens <= 8
    counted = claude.messages.count_tokens(model=MODEL, messages=ASK, system="Be brief.").input_tokens
    assert reply.usage.input_tokens + reply.usage.cache_read_input_tokens == counted
    with claude.messages.stream(model=MODEL, max_tokens=8, messages=ASK, system="Be brief.",
                                extra_body=GREEDY) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == final.content[0].text == reply.content[0].text  # greedy: the same reply
    assert final.usage.output_tokens == reply.usage.output_tokens
    assert [m["id"] for m in claude.models.list().model_dump()["data"]] == [MODEL]


def test_anthropic_stream_has_the_full_event_sequence(server):
    body = {"model": MODEL, "max_tokens": 5, "messages": ASK, "stream": True, **GREEDY}
    with httpx.stream("POST", server.url + "/v1/messages", json=body, headers={"x-api-key": KEY}) as response:
        names = [line[7:] for line in response.iter_lines() if line.startswith("event: ")]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    assert names.count("content_block_start") == names.count("content_block_stop") >= 1


def test_prompt_cache_is_shared_across_keys_and_shows_in_usage(claude, gpt):
    long = [{"role": "user", "content": "Tell me about the monsoon in Pune and Mumbai, in detail, please. " * 2}]
    claude.messages.create(model=MODEL, max_tokens=2, messages=long, extra_body=GREEDY)
    again = gpt.chat.completions.create(model=MODEL, max_tokens=2, temperature=0,
                                        messages=[{"role": "user", "content": long[0]["content"]}])
    assert again.usage.prompt_tokens_details.cached_tokens >= 16


def test_openai_completion_stream_usage_and_n(gpt):
    reply = gpt.chat.completions.create(model=MODEL, max_completion_tokens=6, temperature=0, seed=1, n=2,
                                        messages=[{"role": "system", "content": "Be brief."},
                                                  {"role": "user", "content": "Hi"}])
    assert [c.index for c in reply.choices] == [0, 1]
    assert all(c.finish_reason in ("stop", "length") for c in reply.choices)
    assert reply.choices[0].message.content == reply.choices[1].message.content  # greedy twice
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    chunks = list(gpt.chat.completions.create(model=MODEL, max_tokens=6, temperature=0, stream=True,
                                              stream_options={"include_usage": True},
                                              messages=[{"role": "system", "content": "Be brief."},
                                                        {"role": "user", "content": "Hi"}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reply.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == reply.usage.completion_tokens // 2


def test_openai_tool_history_is_accepted(gpt):
    reply = gpt.chat.completions.create(model=MODEL, max_tokens=4, temperature=0, tools=[
        {"type": "function", "function": {"name": WEATHER["name"], "description": WEATHER["description"],
                                          "parameters": WEATHER["input_schema"]}}], messages=[
        {"role": "user", "content": "Weather in Pune?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Pune"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "31 C, humid"}])
    assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")


@pytest.mark.skipif(not CHAT_WEIGHTS.exists(), reason="the chat model is not trained yet")
def test_tool_round_trip_on_the_shipped_chat_model(tokenizer):
    from llmkit.model.weights import load_model

    from llmkit.course.tools import get_weather

    weather = get_weather.definition()  # the course's tool, as the model was trained to call it
    model, chat_tokenizer = load_model("chat")
    state = build_state(model, chat_tokenizer, model_id="llmkit-chat", keys=[KEY], kv_cache_mb=8)
    with BackgroundServer(state) as running:
        claude = anthropic.Anthropic(base_url=running.url, api_key=KEY, max_retries=0, timeout=60)
        messages = [{"role": "user", "content": "Will it rain in Pune tomorrow?"}]
        reply = claude.messages.create(model="llmkit-chat", max_tokens=96, messages=messages, tools=[weather],
                                       extra_body=GREEDY)
        assert reply.stop_reason == "tool_use"
        call = reply.content[-1]
        assert call.type == "tool_use" and call.name == "get_weather" and isinstance(call.input, dict)
        messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                   "content": "31 C and humid"}]}]
        answer = claude.messages.create(model="llmkit-chat", max_tokens=64, messages=messages, tools=[weather],
                                        extra_body=GREEDY)
        assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_errors_come_in_each_sdks_typed_shape(server, claude, gpt):
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0).messages.create(
            model=MODEL, max_tokens=4, messages=ASK)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).chat.completions.create(
            model=MODEL, max_tokens=4, messages=ASK)
    with pytest.raises(anthropic.NotFoundError, match="is not served here"):
        claude.messages.create(model="claude-nope", max_tokens=4, messages=ASK)
    with pytest.raises(openai.NotFoundError):
        gpt.chat.completions.create(model="gpt-nope", max_tokens=4, messages=ASK)
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        claude.messages.create(model=MODEL, max_tokens=10_000, messages=ASK)
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        gpt.chat.completions.create(model=MODEL, max_tokens=4, messages=ASK, tool_choice="required")
    with pytest.raises(anthropic.BadRequestError, match="messages.0.role"):
        claude.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "robot", "content": "hi"}])


@pytest.mark.parametrize("body, status, words", [
    (b"{not json", 400, "not valid JSON"),
    (b"[1, 2]", 400, "JSON object"),
    (json.dumps({"model": MODEL, "max_tokens": "ten", "messages": ASK}).encode(), 400, "max_tokens"),
    (json.dumps({"model": MODEL, "max_tokens": 4, "messages": "hi"}).encode(), 400, "messages"),
    (json.dumps({"model": MODEL, "max_tokens": 4, "messages": ASK, "temprature": 0}).encode(), 400, "temprature"),
    (json.dumps({"model": MODEL, "max_tokens": 4, "messages": ASK, "tools": [WEATHER] * 5}).encode(), 400, "at most 4"),
    (b"{" + b" " * 60_000 + b"}", 413, "at most"),
])
def test_bad_requests_are_answered_with_what_and_where(server, body, status, words):
    response = httpx.post(server.url + "/v1/messages", content=body,
                          headers={"x-api-key": KEY, "content-type": "application/json"})
    assert response.status_code == status
    error = response.json()["error"]
    assert error["type"] in ("invalid_request_error", "request_too_large") and words in error["message"]


def test_web_search_runs_only_where_the_server_offers_it(claude, tokenizer):
    from llmkit.course.tools import web_search

    search = [{"type": "web_search_20250305", "name": "web_search"}]
    with pytest.raises(anthropic.BadRequestError, match="no web_search"):
        claude.messages.create(model=MODEL, max_tokens=4, messages=ASK, tools=search)
    state = build_state(tiny_model(tokenizer), tokenizer, model_id=MODEL, keys=[KEY], kv_cache_mb=2,
                        server_tools={"web_search": web_search})
    with BackgroundServer(state) as running:
        client = anthropic.Anthropic(base_url=running.url, api_key=KEY, max_retries=0, timeout=60)
        reply = client.messages.create(model=MODEL, max_tokens=4, messages=ASK, tools=search)
        assert reply.stop_reason != "tool_use"  # a server tool's call never ends the turn for the caller


def test_unknown_routes_are_404_in_shape(server):
    response = httpx.get(server.url + "/v1/nothing", headers={"x-api-key": KEY})
    assert response.status_code == 404 and response.json()["error"]["type"] == "not_found_error"


def test_rate_limit_is_429_with_retry_after(tokenizer):
    state = build_state(tiny_model(tokenizer), tokenizer, model_id=MODEL, keys=[KEY, "sk-other"],
                        requests_per_minute=2, kv_cache_mb=2)
    with BackgroundServer(state) as running:
        claude = anthropic.Anthropic(base_url=running.url, api_key=KEY, max_retries=0, timeout=60)
        for _ in range(2):
            claude.messages.create(model=MODEL, max_tokens=2, messages=ASK)
        with pytest.raises(anthropic.RateLimitError) as refused:
            claude.messages.create(model=MODEL, max_tokens=2, messages=ASK)
        assert int(refused.value.response.headers["retry-after"]) >= 1
        other = openai.OpenAI(base_url=running.url + "/v1", api_key="sk-other", max_retries=0, timeout=60)
        assert other.chat.completions.create(model=MODEL, max_tokens=2, messages=ASK).choices  # per key


def test_a_burst_gets_answers_or_clean_refusals_and_nothing_hangs(tokenizer):
    state = build_state(tiny_model(tokenizer), tokenizer, model_id=MODEL, keys=[KEY], max_batch=4, max_waiting=8,
                        kv_cache_mb=2)
    with BackgroundServer(state) as running:
        def one(i):
            with httpx.Client(timeout=60) as http:
                response = http.post(running.url + "/v1/messages", headers={"x-api-key": KEY},
                                     json={"model": MODEL, "max_tokens": 4, "messages": ASK, "stream": i % 2 == 0})
                return response.status_code, response.text

        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            results = list(pool.map(one, range(200), timeout=120))
        statuses = [status for status, _ in results]
        assert set(statuses) <= {200, 529} and statuses.count(200) >= 8
        for status, text in results:
            if status == 200:
                assert "message_stop" in text or '"stop_reason"' in text
            else:
                assert json.loads(text)["error"]["type"] == "overloaded_error"
        after = stats(running)
        assert after["running"] == 0 and after["kv_blocks"]["used"] == 0


def test_a_client_that_leaves_mid_stream_frees_its_slot_and_blocks(server):
    body = {"model": MODEL, "max_tokens": 1000, "messages": ASK, "stream": True, **GREEDY}
    with httpx.stream("POST", server.url + "/v1/messages", json=body, headers={"x-api-key": KEY}) as response:
        lines = response.iter_lines()
        while "content_block_delta" not in next(lines):
            pass
        assert stats(server)["running"] == 1  # still writing its 1000 tokens
        lines.close()  # httpx closes the connection: the client has gone
    deadline = time.monotonic() + 10
    while stats(server)["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    after = stats(server)
    assert after["running"] == 0 and after["kv_blocks"]["used"] == 0 and after["requests"]["cancelled"] >= 1


def test_serve_refuses_to_start_open_on_a_network(capsys, monkeypatch):
    monkeypatch.delenv("LLMKIT_API_KEYS", raising=False)
    with pytest.raises(SystemExit):
        serve_main(["--model", "chat"])
    assert "--api-key" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        serve_main(["--no-auth", "--host", "0.0.0.0"])
    assert "loopback" in capsys.readouterr().err
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and not is_loopback("0.0.0.0")


def test_sigterm_finishes_the_stream_in_flight_then_stops(tokenizer, tmp_path, free_port):
    from llmkit.model.weights import save
    from llmkit.paths import data_path

    save(tiny_model(tokenizer), tmp_path)
    shutil.copy(data_path("models", "base", "tokenizer.json"), tmp_path)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "llmkit", "serve", "--model", str(tmp_path), "--no-auth",
                               "--port", str(port), "--threads", "1"], stdout=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
                break
            except httpx.HTTPError:
                assert server.poll() is None and time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        body = {"model": model, "max_tokens": 200, "messages": ASK, "stream": True, **GREEDY}
        with httpx.stream("POST", url + "/v1/messages", json=body, timeout=60) as response:
            lines = response.iter_lines()
            while "content_block_delta" not in next(lines):
                pass
            server.send_signal(signal.SIGTERM)
            rest = list(lines)
        assert "event: message_stop" in rest  # the reply in flight was finished, not cut off
        assert server.wait(30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has drained
    finally:
        if server.poll() is None:
            server.kill()
    printed = server.stdout.read()
    assert f'anthropic.Anthropic(base_url="{url}"' in printed and f'openai.OpenAI(base_url="{url}/v1"' in printed


def test_a_body_that_never_finishes_arriving_is_timed_out(server, monkeypatch):
    import socket

    from llmkit.serve import app

    monkeypatch.setattr(app, "BODY_TIMEOUT_S", 0.5)
    host, port = server.url[len("http://"):].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: " + KEY.encode()
                     + b"\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"model\"")
        answer = b""
        while b"}}" not in answer:  # the headers and the JSON error body may come in separate pieces
            piece = sock.recv(4096)
            assert piece, f"the server closed the connection without an answer: {answer!r}"
            answer += piece
        answer = answer.decode()
    assert answer.startswith("HTTP/1.1 408") and "timeout_error" in answer
    assert httpx.get(server.url + "/v1/models", headers={"x-api-key": KEY}).status_code == 200  # still serving


def test_the_servers_clients_share_one_count_so_message_ids_never_repeat(tokenizer):
    from llmkit.serve.sequence import RequestContext

    state = build_state(tiny_model(tokenizer), tokenizer, model_id=MODEL, keys=[KEY], kv_cache_mb=4)
    try:
        replies = [state.client(RequestContext()).messages.create(max_tokens=2, messages=ASK, temperature=0)
                   for _ in range(3)]
    finally:
        state.engine.close()
    ids = [reply.id for reply in replies]
    assert len(set(ids)) == 3 and all(i.startswith("msg_") for i in ids)
