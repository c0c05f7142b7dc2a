"""Where the shipped data lives.

The course ships its corpus, tokenizers and checkpoints in the repository's ``data/`` folder.
``LLMKIT_DATA`` overrides it (for example to point a notebook at a folder of your own runs).
"""
from __future__ import annotations

import os
from pathlib import Path

DATA_DIR = Path(os.environ.get("LLMKIT_DATA", Path(__file__).resolve().parent.parent / "data"))


def data_path(*parts: str, must_exist: bool = True) -> Path:
    """Path inside the data folder; a clear error if a shipped file is missing."""
    path = DATA_DIR.joinpath(*parts)
    if must_exist and not path.exists():
        raise FileNotFoundError(
            f"{path} is missing. It is part of the course data: run the llmkit checkout's "
            f"`make lab` set-up from a full clone, or rebuild it with the script named in data/README.md."
        )
    return path
