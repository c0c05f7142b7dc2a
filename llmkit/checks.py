"""Small argument checks shared by every floor, so each function states its rules in one line.

Each check returns the value it was given (so ``n = check_int("n", n, minimum=1)`` reads as a
rule, not a paragraph) and raises with a message that names the argument, what it got and what
it needs. ``bool`` is a subclass of ``int`` in Python, so ``True`` would otherwise pass as 1.
"""
from __future__ import annotations

import math
from typing import Any


def is_int(value: Any) -> bool:
    """A real integer: ``int`` but not ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an int within ``[minimum, maximum]``, or a ``TypeError``/``ValueError`` naming ``name``."""
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value}")
    return value


def check_number(name: str, value: Any, *, minimum: float | None = None, maximum: float | None = None,
                 above: float | None = None) -> float:
    """A finite int or float (not bool) within bounds; ``above`` is a strict lower bound."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value}")
    if above is not None and not value > above:
        raise ValueError(f"{name} must be greater than {above}, got {value}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """``True`` or ``False`` exactly (a truthy string such as ``"false"`` is a mistake, not a yes)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return value
