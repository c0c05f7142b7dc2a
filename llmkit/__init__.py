"""llmkit: every stage of text -> tokens -> model -> tokens -> text, as small readable modules.

Import the stage you need (``from llmkit.tokens.tokenizer import Tokenizer``); this file only exposes
the few entry points a learner reaches for first.
"""
from llmkit.paths import DATA_DIR, data_path

__version__ = "0.1.0"


def load_model(name_or_dir="base", *, device=None):
    """Return ``(model, tokenizer)`` for a shipped model ("base", "chat") or a model folder."""
    from llmkit.model.weights import load_model as _load_model  # lazy: keeps ``import llmkit`` light

    return _load_model(name_or_dir, device=device)


__all__ = ["DATA_DIR", "data_path", "load_model", "__version__"]
