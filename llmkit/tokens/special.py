"""Special tokens: control signals (``<|endoftext|>``, the chat markers) that text must not forge.

A model learns to act on its control tokens, so if a user's text could turn into one, the user
could end a turn or forge a tool result. The rule is tiktoken's: special-token text in the input
is an error unless the caller names it, either as allowed (it becomes the control id) or as
ordinary text (it is encoded like any other characters).
"""
from __future__ import annotations

import functools
from collections.abc import Collection
from typing import Literal

import regex

SpecialSet = Literal["all"] | Collection[str]


def resolve_names(names: SpecialSet, known: dict[str, int], argument: str) -> set[str]:
    """``"all"`` or a collection of special-token names, checked against the tokenizer's own."""
    if names == "all":
        return set(known)
    if isinstance(names, str):
        raise TypeError(f"{argument} must be 'all' or a collection of special-token strings, not the string {names!r}")
    unknown = set(names) - set(known)
    if unknown:
        raise ValueError(
            f"{argument} names {sorted(unknown)}, which are not special tokens of this tokenizer; it has {sorted(known)}"
        )
    return set(names)


def refuse_disallowed(text: str, disallowed: set[str]) -> None:
    """Raise if ``text`` contains any of the ``disallowed`` special tokens, saying how to permit it."""
    found = alternation(frozenset(disallowed)).search(text) if disallowed else None
    if found:
        raise ValueError(
            f"the text contains the special token {found.group()!r} (at character {found.start()}). "
            f"Special tokens are control signals, so user text may not produce them by accident. "
            f"Pass allowed_special={{{found.group()!r}}} to encode it as the control token, or "
            f"disallowed_special=() to encode it as ordinary text."
        )


@functools.lru_cache(maxsize=64)
def alternation(names: frozenset[str]) -> regex.Pattern:
    """A regex matching any of ``names`` literally, longest first (built once per set of names)."""
    names = sorted(names, key=len, reverse=True)
    return regex.compile("|".join(regex.escape(name) for name in names) if names else r"(?!)")
