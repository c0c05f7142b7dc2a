"""A word as it reads inside a sentence, whichever pre-split the tokenizer uses.

Under GPT-4's pre-split a word carries the space before it: " king" is one token, and a prompt
that ends in "my good" is followed by a token such as " lord". Under the course's ``spaced``
pattern the space is a token of its own: " king" is " " + "king", and the token after "my good"
is almost surely the space. Code that asks "which token is this word?" or "what comes after this
prompt?" must not care which of the two it is handed, so it asks here:

- ``word_ids`` / ``word_token``: the ids of a word said after a space, without the space's own
  token where the pattern keeps it apart (so " king" and "king" give the same answer);
- ``next_word_prompt``: a prompt's ids, plus the space's token where the pattern keeps it apart,
  so that the model's next token is the start of a word under either pattern;
- ``token_at``: which token holds a given character of a text (the last piece of "rain").
"""
from __future__ import annotations

from bisect import bisect_right


def space_ids(tokenizer) -> list[int]:
    """The ids of a single space on its own."""
    return tokenizer.encode_ordinary(" ")


def spaces_apart(tokenizer) -> bool:
    """True when the pre-split gives the space before a word its own token (the ``spaced``
    pattern), False when the word carries it (GPT-4's and GPT-2's)."""
    space = space_ids(tokenizer)
    return tokenizer.encode_ordinary(" the")[:len(space)] == space


def word_ids(tokenizer, word: str) -> list[int]:
    """The ids of ``word`` as it reads after a space inside a sentence, without the space's own
    token where the pre-split keeps it apart. A leading space in ``word`` is allowed and changes
    nothing (``" king"`` and ``"king"`` are the same word)."""
    word = word[1:] if word.startswith(" ") else word
    if not word or word[0].isspace():
        raise ValueError(f"expected a word, got {word!r}: give the word itself, such as 'king'")
    ids = tokenizer.encode_ordinary(" " + word)
    space = space_ids(tokenizer)
    return ids[len(space):] if spaces_apart(tokenizer) and ids[:len(space)] == space else ids


def word_token(tokenizer, word: str) -> int:
    """The one id of ``word`` as it reads inside a sentence; a clear error if it takes several."""
    ids = word_ids(tokenizer, word)
    if len(ids) != 1:
        pieces = " | ".join(repr(tokenizer.decode([i], errors="replace")) for i in ids)
        raise ValueError(f"{word.strip()!r} is {len(ids)} tokens inside a sentence ({pieces}), not one; "
                         "pick a word the tokenizer keeps whole")
    return ids[0]


def next_word_prompt(tokenizer, text: str) -> list[int]:
    """The ids of ``text`` followed, where the pre-split keeps spaces apart, by the space's token:
    what the model reads before the next *word*. Under GPT-4's pattern it is just ``text``'s ids
    (the next token, " lord", brings its own space)."""
    ids = tokenizer.encode_ordinary(text)
    return ids + space_ids(tokenizer) if spaces_apart(tokenizer) else ids


def token_at(tokenizer, ids: list[int], char: int) -> int:
    """The position in ``ids`` of the token that holds character ``char`` of their text: "the last
    piece of 'rain'" is ``token_at(tok, ids, text.index("rain") + 3)``, whether "rain" is one token
    or "␣ra" + "in"."""
    text, starts = tokenizer.decode_with_offsets(ids)
    if not 0 <= char < len(text):
        raise ValueError(f"character {char} is outside the text ({len(text)} characters)")
    return bisect_right(starts, char) - 1
