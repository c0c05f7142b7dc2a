"""Files we write survive a crash whole, and files we read cannot hang or flood memory.

A write goes to a temporary name in the same folder, is flushed to disk (``fsync``) and only then
renamed over the real name: a rename within one folder is atomic, so a reader (or a resumed run)
sees the old file or the new one, never half of either. A read first checks that the path is a
regular file (a FIFO would block forever, ``/dev/zero`` never ends) and caps how many bytes it takes.
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

MAX_JSON_BYTES = 64 * 1024 * 1024  # far above any config or tokenizer we write
SHARED_FILE_MODE = 0o644  # mkstemp makes private files; models and tokenizers are meant to be shared


def fsync_folder(folder: str | Path) -> None:
    """Make a rename inside ``folder`` durable (a no-op where folders cannot be opened, e.g. Windows)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def atomic_write(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` so that ``path`` is either its old content or all of the new."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    return _write_whole(Path(path), lambda out: out.write(payload))


def atomic_copy(source: str | Path, target: str | Path) -> Path:
    """Copy a file with the same guarantee as ``atomic_write``."""
    def copy(out: BinaryIO) -> None:
        with open(source, "rb") as src:
            shutil.copyfileobj(src, out)

    return _write_whole(Path(target), copy)


def _write_whole(path: Path, write: Callable[[BinaryIO], object]) -> Path:
    """Write through ``write`` into a temporary file beside ``path``, flush it to disk, then rename it
    over ``path``: a rename is atomic, so a reader (or a crash) sees the old file or the new one."""
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, SHARED_FILE_MODE)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    fsync_folder(path.parent)
    return path


def fsync_file(path: str | Path) -> None:
    """Flush a file another library wrote (safetensors) to disk before it is renamed into place."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def read_limited(path: str | Path, max_bytes: int = MAX_JSON_BYTES, *, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; a clear error for anything else.

    Checking the type first matters: reading a FIFO blocks until someone writes to it, and a link
    to a device such as ``/dev/zero`` never reaches its end.
    """
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is missing") from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"{path} is not a regular file (a folder, FIFO or device?); the {what} must be a plain file")
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{path} is larger than {max_bytes:,} bytes, far more than any {what} needs; "
                         "is it the right file?")
    return data
