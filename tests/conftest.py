"""Fixtures shared by the whole test suite (keep this small; topic fixtures live beside their tests)."""
from __future__ import annotations

import socket
import sys

import pytest


@pytest.fixture
def free_port():
    """A function returning a TCP port on loopback that is free right now."""

    def pick() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    return pick


@pytest.fixture(scope="session")
def tokenizer():
    """The shipped course tokenizer (a test module may define its own ``tokenizer`` instead)."""
    from llmkit.paths import data_path
    from llmkit.tokens.tokenizer import Tokenizer

    return Tokenizer.load(data_path("models", "base", "tokenizer.json"))


@pytest.fixture(scope="session")
def tiny_llama():
    """Make a tiny random Llama-family model (seeded), for tests that need a model but not a good one."""
    import torch

    from llmkit.model.transformer import ModelConfig, Transformer

    def make(vocab_size: int, context_length: int = 64):
        torch.manual_seed(0)
        config = ModelConfig.llama(vocab_size=vocab_size, context_length=context_length, d_model=32,
                                   n_layers=2, n_heads=4)
        return Transformer(config).eval()

    return make


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run fastest on one thread, and then don't fight other processes for the cores.
    Use it in a module with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def close_figures():
    """Close every matplotlib figure a test drew (only where a test imported pyplot)."""
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")
