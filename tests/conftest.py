"""Fixtures shared by the whole test suite (keep this small; topic fixtures live beside their tests)."""
from __future__ import annotations

import socket

import pytest


@pytest.fixture
def free_port():
    """A function returning a TCP port on loopback that is free right now."""

    def pick() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    return pick
