"""Where the shipped data lives, in a checkout and in an installed package alike.

The course keeps its corpus, tokenizers and checkpoints in the repository's ``data/`` folder,
the one source of truth. A built wheel (``pip install path/to/checkout``) carries the shipped
models inside the package, as ``llmkit/data/models/...``, so ``load_model("chat")`` works in any
environment. Which folder is used, first match wins:

1. ``LLMKIT_DATA``, if set (for example a folder of your own runs);
2. the checkout's ``data/`` beside the package, when running from a checkout;
3. ``llmkit/data`` inside the installed package.
"""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CHECKOUT_DATA = PACKAGE_DIR.parent / "data"
INSTALLED_DATA = PACKAGE_DIR / "data"


def _is_checkout() -> bool:
    """True when this package runs from a source checkout (not from site-packages)."""
    return (PACKAGE_DIR.parent / "pyproject.toml").is_file() and (CHECKOUT_DATA / "models").is_dir()


def _data_dir() -> Path:
    if os.environ.get("LLMKIT_DATA"):
        return Path(os.environ["LLMKIT_DATA"])
    if _is_checkout():
        return CHECKOUT_DATA
    return INSTALLED_DATA


def _runs_dir() -> Path:
    """Where derived files (tokenised corpora) go: ``runs/`` in a checkout, else the user's cache."""
    if _is_checkout():
        return PACKAGE_DIR.parent / "runs"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "llmkit"


DATA_DIR = _data_dir()
RUNS_DIR = _runs_dir()


def data_path(*parts: str, must_exist: bool = True) -> Path:
    """Path inside the data folder; a clear error if a shipped file is missing."""
    path = DATA_DIR.joinpath(*parts)
    if must_exist and not path.exists():
        where = "LLMKIT_DATA" if os.environ.get("LLMKIT_DATA") else "the course data"
        raise FileNotFoundError(
            f"{path} is missing. It is part of {where}: an installed package carries only the shipped models "
            f"and tokenizer; for the corpus and the rest, use a full clone of the llmkit checkout (or point "
            f"LLMKIT_DATA at its data/ folder), or rebuild it with the script named in data/README.md."
        )
    return path
