"""``llmkit serve``: load a model, start the engine and the gateway, and serve both APIs.

    llmkit serve --api-key sk-course-1                  # the chat model on http://127.0.0.1:8000
    llmkit serve --no-auth --max-batch 16 --kv-cache-mb 128

Without a key the server refuses to start, unless ``--no-auth`` is given, and then only on a
loopback address: an open model on a network is an open bill (and an open door) for anyone.
"""
from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import threading
import time

import torch

from llmkit.serve.app import ServerLimits, ServerState, connection_limit, create_app
from llmkit.serve.engine import Engine
from llmkit.serve.gateway import Gateway

KEYS_VARIABLE = "LLMKIT_API_KEYS"  # comma-separated, added to --api-key


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmkit serve", description="Serve a model over the Anthropic Messages and "
                                "OpenAI Chat Completions APIs, batching concurrent requests.")
    p.add_argument("--model", default="chat", help="'chat', 'base' or a model folder (default: chat)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", action="append", default=[], help=f"a key clients must send (repeatable; "
                   f"also ${KEYS_VARIABLE}, comma-separated)")
    p.add_argument("--no-auth", action="store_true", help="no keys (allowed only on a loopback host)")
    p.add_argument("--requests-per-minute", type=float, default=None, help="per key (default: no limit)")
    p.add_argument("--tokens-per-minute", type=float, default=None, help="per key, prompt + output (default: no limit)")
    p.add_argument("--max-batch", type=int, default=8, help="sequences decoded together (default: 8)")
    p.add_argument("--max-waiting", type=int, default=64, help="requests that may wait; more get 529 (default: 64)")
    p.add_argument("--kv-cache-mb", type=float, default=64.0, help="the KV block pool in MiB (default: 64)")
    p.add_argument("--request-timeout", type=float, default=300.0, help="seconds one request may run (default: 300)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads for passes that read a long "
                   "prompt (default: torch's choice); decode steps run on one, leaving the rest to the request threads")
    p.add_argument("--device", default=None, help="cpu, cuda or mps (default: cpu)")
    return p


def is_loopback(host: str) -> bool:
    try:
        return all(ipaddress.ip_address(info[4][0]).is_loopback
                   for info in socket.getaddrinfo(host, None))
    except (socket.gaierror, ValueError):
        return False


def api_keys(args) -> list[str]:
    from_env = [k.strip() for k in os.environ.get(KEYS_VARIABLE, "").split(",") if k.strip()]
    return list(dict.fromkeys(args.api_key + from_env))


def build_state(model, tokenizer, *, model_id: str, keys: list[str], server_tools: dict | None = None,
                requests_per_minute: float | None = None, tokens_per_minute: float | None = None,
                max_batch: int = 8, max_waiting: int = 64, kv_cache_mb: float = 64.0,
                request_timeout_s: float = 300.0, limits: ServerLimits | None = None) -> ServerState:
    """Everything a server holds: the engine (which starts its thread now) and the gateway."""
    engine = Engine(model, max_batch=max_batch, kv_cache_mb=kv_cache_mb, max_waiting=max_waiting,
                    request_timeout_s=request_timeout_s)
    gateway = Gateway(keys, requests_per_minute=requests_per_minute, tokens_per_minute=tokens_per_minute)
    return ServerState(engine, tokenizer, gateway, model_id, dict(server_tools or {}), limits or ServerLimits())


def sdk_lines(base_url: str, key: str) -> str:
    """The two lines a learner pastes into Python to point the official SDKs here."""
    return (f'anthropic.Anthropic(base_url="{base_url}", api_key="{key}")\n'
            f'openai.OpenAI(base_url="{base_url}/v1", api_key="{key}")')


def main(argv: list[str] | None = None, *, server_tools: dict | None = None) -> int:
    import uvicorn

    from llmkit.model.weights import load_model

    args = parser().parse_args(argv)
    keys = api_keys(args)
    if not keys and not args.no_auth:
        parser().error(f"give at least one --api-key (or set ${KEYS_VARIABLE}); for a server only this machine "
                       f"can reach, --no-auth")
    if not keys and not is_loopback(args.host):
        parser().error(f"--no-auth is allowed only on a loopback host (127.0.0.1, ::1, localhost), not {args.host!r}")
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model, device=args.device)
    model_id = f"llmkit-{os.path.basename(os.path.normpath(args.model))}"
    state = build_state(model, tokenizer, model_id=model_id, keys=keys, server_tools=server_tools,
                        requests_per_minute=args.requests_per_minute, tokens_per_minute=args.tokens_per_minute,
                        max_batch=args.max_batch, max_waiting=args.max_waiting, kv_cache_mb=args.kv_cache_mb,
                        request_timeout_s=args.request_timeout)
    base_url = f"http://{args.host}:{args.port}"
    print(f"llmkit serve: {model_id} on {base_url} ({state.engine.pool.num_blocks} KV blocks of "
          f"{state.engine.pool.block_size} tokens, batch up to {args.max_batch})\n"
          f"Paste into Python:\n{sdk_lines(base_url, keys[0] if keys else 'no-key-needed')}", flush=True)
    uvicorn.run(create_app(state), host=args.host, port=args.port, log_level="warning",
                limit_concurrency=connection_limit(state), timeout_graceful_shutdown=int(args.request_timeout))
    return 0


class BackgroundServer:
    """A server in a background thread of this process, for a notebook or a test:

        with BackgroundServer(state) as server:
            client = anthropic.Anthropic(base_url=server.url, api_key=...)

    It listens on a free loopback port; ``stop()`` (or leaving the ``with``) finishes the requests
    in flight and stops the engine."""

    def __init__(self, state: ServerState, *, host: str = "127.0.0.1", port: int = 0):
        import uvicorn

        if port == 0:
            with socket.socket() as sock:
                sock.bind((host, 0))
                port = sock.getsockname()[1]
        self.state, self.url = state, f"http://{host}:{port}"
        config = uvicorn.Config(create_app(state), host=host, port=port, log_level="warning",
                                limit_concurrency=connection_limit(state), timeout_graceful_shutdown=30)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="llmkit-serve", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start on {self.url}")
            time.sleep(0.02)

    def stop(self, timeout: float = 60) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)

    def __enter__(self) -> BackgroundServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class ServerProcess:
    """``llmkit serve OPTIONS...`` in a process of its own, as a real server runs: its clients do not
    share its Python (the SDKs' parsing would compete with the engine for one interpreter).

        server = ServerProcess("--api-key", "sk-1")   # waits until it answers
        ...
        server.stop()                                # SIGTERM: finishes requests in flight

    It listens on a free loopback port; ``stop`` returns the exit status."""

    def __init__(self, *options: str, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 120):
        import subprocess
        import sys
        import urllib.error
        import urllib.request

        if port == 0:
            with socket.socket() as sock:
                sock.bind((host, 0))
                port = sock.getsockname()[1]
        self.url = f"http://{host}:{port}"
        self.process = subprocess.Popen([sys.executable, "-m", "llmkit", "serve", "--host", host, "--port", str(port),
                                         *options], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                urllib.request.urlopen(self.url + "/v1/models", timeout=1)
                return
            except urllib.error.HTTPError:  # it answered (401 without a key): it is up
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    output = self.stop()
                    raise RuntimeError(f"llmkit serve did not start on {self.url}:\n{output}") from None
                time.sleep(0.2)

    def stop(self, timeout: float = 60) -> str:
        """Send SIGTERM, wait for the server to finish, and return what it printed."""
        import signal
        import subprocess

        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.stdout.read()
