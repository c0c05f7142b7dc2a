"""The gateway in front of the model: who may call (API keys) and how often (rate limits).

A hosted API checks every request before it reaches a model: is the key known, has this key used
up its requests or tokens for this minute? Each limit here is a *token bucket*: it holds up to a
minute's allowance, refills continuously, and a request that finds it empty is refused with 429
and ``retry-after`` (the seconds until it would pass), so a client can back off exactly that long.
"""
from __future__ import annotations

import hmac
import math
import threading
import time
from dataclasses import dataclass, field

from llmkit.serve.errors import APIError


@dataclass
class Bucket:
    """Up to ``per_minute`` units, refilled at ``per_minute / 60`` per second."""

    per_minute: float
    level: float = field(init=False)
    updated: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.level = self.per_minute

    def refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.per_minute, self.level + (now - self.updated) * self.per_minute / 60)
        self.updated = now

    def wait_for(self, amount: float) -> float:
        """Seconds until ``amount`` units are in the bucket (0 if they are now)."""
        self.refill()
        missing = amount - self.level
        return 0.0 if missing <= 0 else missing * 60 / self.per_minute


class Gateway:
    """API keys and per-key limits. ``keys`` empty means no authentication (loopback only)."""

    def __init__(self, keys: list[str], *, requests_per_minute: float | None = None,
                 tokens_per_minute: float | None = None):
        for name, value in (("requests_per_minute", requests_per_minute), ("tokens_per_minute", tokens_per_minute)):
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"{name} must be a number > 0 (or None for no limit), got {value!r}")
        self.keys = list(keys)
        self.requests_per_minute, self.tokens_per_minute = requests_per_minute, tokens_per_minute
        self._buckets: dict[str, tuple[Bucket | None, Bucket | None]] = {}
        self._lock = threading.Lock()

    def authenticate(self, key: str | None) -> str:
        """The caller's key, checked; "" when the server runs without keys."""
        if not self.keys:
            return ""
        if not key:
            raise APIError(401, "missing API key: send it as the x-api-key header (Anthropic SDK) or as "
                                "'Authorization: Bearer <key>' (OpenAI SDK)")
        if not any(hmac.compare_digest(key.encode(), known.encode()) for known in self.keys):
            raise APIError(401, "invalid API key: it is not one this server was started with (--api-key)")
        return key

    def admit(self, key: str) -> None:
        """Count one request against the key's limits, or refuse it with 429."""
        with self._lock:
            requests, tokens = self._limits(key)
            wait = max(requests.wait_for(1) if requests else 0.0, tokens.wait_for(1) if tokens else 0.0)
            if wait > 0:
                kind = "requests" if requests and requests.wait_for(1) > 0 else "tokens"
                limit = self.requests_per_minute if kind == "requests" else self.tokens_per_minute
                raise APIError(429, f"rate limited: this key may use {limit:g} {kind} per minute; retry in "
                                    f"{math.ceil(wait)} s", headers={"retry-after": str(math.ceil(wait))})
            if requests:
                requests.level -= 1

    def charge(self, key: str, tokens: int) -> None:
        """Take a finished request's tokens (prompt + output) from the key's token bucket; it may go
        below zero, and then the key waits until it has refilled."""
        with self._lock:
            bucket = self._limits(key)[1]
            if bucket is not None:
                bucket.refill()
                bucket.level -= tokens

    def _limits(self, key: str) -> tuple[Bucket | None, Bucket | None]:
        if key not in self._buckets:
            self._buckets[key] = (Bucket(self.requests_per_minute) if self.requests_per_minute else None,
                                  Bucket(self.tokens_per_minute) if self.tokens_per_minute else None)
        return self._buckets[key]
