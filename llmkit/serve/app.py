"""The HTTP server: FastAPI routes for both APIs, in front of the gateway and the engine.

Each request goes gateway (key, rate limit) -> checks (body size, JSON, fields) -> a chat client
whose token loop is the shared engine (``Client.token_stream``), so rendering, tool calls, server
tools and usage are the chat client's, and the batching is the engine's. The model runs in the
engine's thread; a request's thread only waits for tokens and shapes them for the wire.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sse_starlette.sse import EventSourceResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from llmkit.chat.client import Client, ContextWindowError
from llmkit.serve import anthropic_api, openai_api
from llmkit.serve.engine import Engine, Overloaded, RequestTooLarge
from llmkit.serve.errors import APIError, anthropic_body, bad_request, openai_body
from llmkit.serve.gateway import Gateway
from llmkit.serve.relay import SEPARATOR, Failed, Relay, encode
from llmkit.serve.requests import check_max_tokens
from llmkit.serve.sequence import RequestContext, RequestTimeout

BODY_TIMEOUT_S = 30


@dataclass
class ServerLimits:
    """What one request may ask for."""

    max_body_bytes: int = 1_000_000
    max_tools: int = 32


@dataclass
class ServerState:
    """Everything the routes share: the engine (the one model), the tokenizer, the gateway, the
    served model's name, the server tools it runs (e.g. the course's web_search) and the limits."""

    engine: Engine
    tokenizer: Any
    gateway: Gateway
    model_id: str
    server_tools: dict = field(default_factory=dict)
    limits: ServerLimits = field(default_factory=ServerLimits)
    threads: anyio.CapacityLimiter | None = None
    numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def client(self, context: RequestContext) -> Client:
        """A chat client for one request, its token loop the shared engine (one client per request:
        nothing of one caller's conversation stays behind for another)."""
        # one shared count: message and tool-call ids are unique across the server's requests
        client = Client.from_model(self.engine.model, self.tokenizer, ids=self.numbers)
        client.token_stream = functools.partial(self.engine.stream, context=context)
        return client


def connection_limit(state: ServerState) -> int:
    """Connections uvicorn serves at once (it answers 503 beyond): the batch, the queue, and room
    for cheap requests (stats, models, refusals), so a flood cannot make unbounded threads."""
    return state.engine.max_batch + state.engine.max_waiting + 32


def create_app(state: ServerState) -> FastAPI:
    """The ASGI app; run it with uvicorn (``llmkit serve``, or ``BackgroundServer`` in a notebook)."""

    @contextlib.asynccontextmanager
    async def lifespan(app):
        state.threads = anyio.CapacityLimiter(state.engine.max_batch + state.engine.max_waiting + 8)
        yield
        await anyio.to_thread.run_sync(state.engine.close, 60.0)

    app = FastAPI(title="llmkit serve", lifespan=lifespan)
    app.state.llmkit = state

    @app.exception_handler(APIError)
    async def api_error(request: Request, error: APIError):
        return error_response(request, error)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException):
        message = f"no route {request.method} {request.url.path}; see GET /v1/models, POST /v1/messages, " \
                  f"POST /v1/chat/completions" if error.status_code in (404, 405) else str(error.detail)
        return error_response(request, APIError(404 if error.status_code == 405 else error.status_code, message))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception):
        return error_response(request, APIError(500, f"internal error: {type(error).__name__}: {error}"))

    @app.get("/v1/models")
    async def models(request: Request):
        state.gateway.authenticate(api_key(request))
        return {"object": "list", "data": [model_card(state)], "has_more": False,
                "first_id": state.model_id, "last_id": state.model_id}

    @app.get("/v1/models/{model_id}")
    async def model(model_id: str, request: Request):
        state.gateway.authenticate(api_key(request))
        check_model(state, model_id)
        return model_card(state)

    @app.get("/v1/stats")
    async def stats(request: Request):
        state.gateway.authenticate(api_key(request))
        return state.engine.stats()

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request):
        state.gateway.authenticate(api_key(request))
        body = await read_json(request, state.limits.max_body_bytes)
        if isinstance(body, dict):
            body = {**body, "max_tokens": 1}
        parsed = anthropic_api.parse_request(body, state.server_tools, state.limits.max_tools)
        check_model(state, parsed.model)
        args = {k: parsed.arguments[k] for k in ("messages", "system", "tools", "thinking")}
        rendered = await run_checked(state, lambda: state.client(RequestContext()).messages.render(**args))
        # (the same render a request makes, so the count equals its input + cache-read tokens)
        return {"input_tokens": len(rendered)}

    @app.post("/v1/messages")
    async def messages(request: Request):
        key = admit(state, request)
        body = await read_json(request, state.limits.max_body_bytes)
        parsed = anthropic_api.parse_request(body, state.server_tools, state.limits.max_tools)
        check_model(state, parsed.model)
        max_tokens = check_max_tokens(parsed.max_tokens, state.engine.model.config.context_length)
        context = RequestContext()
        client = state.client(context)

        def reply():
            return client.messages.stream(max_tokens=max_tokens, **parsed.arguments)

        if not parsed.stream:
            message = await run_checked(state, lambda: last(reply()))
            charge(state, key, [message])
            return anthropic_api.message_json(message, state.model_id, context.cache_write_tokens)

        def events() -> Iterator[dict]:
            items = reply()
            first = next(items)  # the request is checked and queued (or refused) here
            prompt = len(client.messages.render(**{k: parsed.arguments[k] for k in ("messages", "system", "tools")}))
            for name, data in anthropic_api.stream_events(prepend(first, items), state.model_id,
                                                          f"msg_{uuid.uuid4().hex[:24]}", prompt,
                                                          lambda: context.cache_write_tokens):
                if name == "message_delta":
                    usage = data["usage"]
                    state.gateway.charge(key, usage["input_tokens"] + usage["cache_read_input_tokens"]
                                         + usage["output_tokens"])
                yield {"event": name, "data": json.dumps(data, ensure_ascii=False)}

        return await stream_response(state, events, context, anthropic_error_event)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        key = admit(state, request)
        body = await read_json(request, state.limits.max_body_bytes)
        context_length = state.engine.model.config.context_length
        parsed, n, include_usage = openai_api.parse_request(body, state.limits.max_tools, context_length)
        check_model(state, parsed.model)
        name = "max_completion_tokens" if isinstance(body, dict) and "max_completion_tokens" in body else "max_tokens"
        max_tokens = check_max_tokens(parsed.max_tokens, context_length, name)
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        context = RequestContext()
        client = state.client(context)

        def reply(choice: int):  # each choice is its own request (a seed moves on by one per choice)
            seed = parsed.arguments["seed"]
            arguments = {**parsed.arguments, "seed": None if seed is None else seed + choice}
            return client.messages.stream(max_tokens=max_tokens, **arguments)

        if not parsed.stream:
            replies = await run_checked(state, lambda: [last(reply(choice)) for choice in range(n)])
            charge(state, key, replies)
            return openai_api.completion_json(completion_id, state.model_id, replies)

        def events() -> Iterator[dict]:
            replies: list = []
            for choice in range(n):
                for piece in openai_api.stream_chunks(reply(choice), choice, completion_id, state.model_id, replies):
                    yield {"data": json.dumps(piece, ensure_ascii=False)}
            charge(state, key, replies)
            if include_usage:
                usage = openai_api.usage_json(replies)
                yield {"data": json.dumps(openai_api.chunk(completion_id, state.model_id, [], usage))}
            yield {"data": "[DONE]"}

        return await stream_response(state, events, context, openai_error_event)

    return app


# --- request plumbing ------------------------------------------------------------------------------

def api_key(request: Request) -> str | None:
    key = request.headers.get("x-api-key")
    if key:
        return key
    authorization = request.headers.get("authorization", "")
    return authorization[7:].strip() if authorization.lower().startswith("bearer ") else None


def admit(state: ServerState, request: Request) -> str:
    key = state.gateway.authenticate(api_key(request))
    state.gateway.admit(key)
    return key


async def read_json(request: Request, limit: int) -> Any:
    """The body as JSON, refusing more than ``limit`` bytes before reading them all."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise APIError(413, f"request body is {int(declared)} bytes; this server takes at most {limit}")
    body = bytearray()
    try:
        with anyio.fail_after(BODY_TIMEOUT_S):  # a client that sends its body slowly holds nothing for long
            async for piece in request.stream():
                body += piece
                if len(body) > limit:
                    raise APIError(413, f"request body is over {limit} bytes, the most this server takes")
    except TimeoutError:
        raise APIError(408, f"the request body did not arrive within {BODY_TIMEOUT_S} s") from None
    try:
        return json.loads(body)
    except ValueError as error:
        raise bad_request(f"the body is not valid JSON: {error}") from None


def check_model(state: ServerState, model: str) -> None:
    if model != state.model_id:
        raise APIError(404, f"model: {model!r} is not served here; this server serves {state.model_id!r} "
                            f"(see GET /v1/models)")


def model_card(state: ServerState) -> dict:
    return {"id": state.model_id, "type": "model", "object": "model", "display_name": state.model_id,
            "created_at": "2026-01-01T00:00:00Z", "created": 1767225600, "owned_by": "llmkit",
            "context_window": state.engine.model.config.context_length}


def is_openai(request: Request) -> bool:
    return request.url.path.startswith("/v1/chat/")


def error_response(request: Request, error: APIError) -> JSONResponse:
    status = error.status
    if is_openai(request):
        status = 503 if status == 529 else status
        return JSONResponse(openai_body(error), status_code=status, headers=error.headers)
    return JSONResponse(anthropic_body(error), status_code=status, headers=error.headers)


async def run_checked(state: ServerState, function):
    """Run blocking chat-client work in a worker thread; its errors become API errors."""
    try:
        return await anyio.to_thread.run_sync(function, limiter=state.threads)
    except Exception as error:
        raise as_api_error(error) from None


def as_api_error(error: BaseException) -> APIError:
    """The API error for what went wrong inside a request (a bug stays a 500)."""
    if isinstance(error, APIError):
        return error
    if isinstance(error, Overloaded):
        return APIError(529, f"overloaded: {error}", headers={"retry-after": "1"})
    if isinstance(error, RequestTimeout):
        return APIError(504, str(error))
    if isinstance(error, (RequestTooLarge, ContextWindowError, ValueError, TypeError, KeyError)):
        return bad_request(str(error))
    return APIError(500, f"internal error: {type(error).__name__}: {error}")


def last(items: Iterator):
    """The final item of a stream: the finished reply."""
    item = None
    for item in items:
        pass
    return item


def prepend(first, items: Iterator) -> Iterator:
    yield first
    yield from items


def charge(state: ServerState, key: str, replies: list) -> None:
    state.gateway.charge(key, sum(r.usage.input_tokens + r.usage.cache_read_input_tokens + r.usage.output_tokens
                                  for r in replies))


def anthropic_error_event(error: APIError) -> dict:
    return {"event": "error", "data": json.dumps(anthropic_body(error))}


def openai_error_event(error: APIError) -> dict:
    return {"data": json.dumps(openai_body(error))}


async def stream_response(state: ServerState, events, context: RequestContext, error_event) -> EventSourceResponse:
    """Server-sent events made in the request's own thread (``llmkit.serve.relay``), written a
    batch at a time. The first event is awaited before answering, so a refused request still gets
    its status (400, 529, ...). An error later, mid-stream, becomes an error event. On shutdown
    (SIGTERM) a stream in flight is let finish, up to the time one request may take, not cut off."""
    relay = Relay(events)
    try:
        pending = await relay.take()
        if isinstance(pending[0], Failed):
            raise as_api_error(pending[0].error)
    except BaseException:
        context.cancel()
        raise

    async def stream():
        try:
            items = pending
            while True:
                ready = list(itertools.takewhile(lambda item: isinstance(item, dict), items))
                if ready:
                    yield encode(ready)
                if len(ready) < len(items):  # the end, or an error
                    end = items[len(ready)]
                    if isinstance(end, Failed):
                        yield encode([error_event(as_api_error(end.error))])
                    return
                items = await relay.take()
        finally:
            context.cancel()  # a client that left frees its slot and blocks at the engine's next step

    return EventSourceResponse(stream(), ping=15, sep=SEPARATOR, shutdown_event=anyio.Event(),
                               shutdown_grace_period=state.engine.request_timeout_s)
