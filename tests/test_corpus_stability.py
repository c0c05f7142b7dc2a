"""The generated documents of the recipe's corpus and tokenizer stay the text the shipped base was
trained on. A fresh checkout remakes them (they are not shipped), so a change to a generator that
they use (a new phrasing, a new way to draw a word) would quietly give the next rebuild another
corpus than the one its figures describe. Such a change belongs behind the skill conversations'
switches (``invent_every_word``, ``later_forms``, ``chatter``); if a change to the corpus is meant,
rebuild the base with it and update these digests in the same commit."""
from __future__ import annotations

import hashlib

import pytest

from llmkit.course.structured_text import documents

DIGESTS = [  # (n, seed, split): sha256 of the documents joined by NUL, checked against the run that made the base
    ((300, 1, "train"), "b361bb16b4b002ed66747250eab169460cc618919a44cc3361639e1b7750ab01"),  # corpus stage
    ((60, 2, "heldout"), "66f4b729514fa753d9f6fe04715e7a4aa47ee56125933d6cb7e007c9ddae7edb"),  # its held-out set
    ((100, 0, "train"), "8c9139410c20a6054944b63a25511222e2019217b9596ee1c5b203450caddb64"),  # tokenizer stage
]


@pytest.mark.parametrize(("args", "digest"), DIGESTS)
def test_the_corpus_documents_are_the_ones_the_base_learned_from(args, digest):
    n, seed, split = args
    text = "\x00".join(documents(n, seed=seed, split=split))
    assert hashlib.sha256(text.encode()).hexdigest() == digest
