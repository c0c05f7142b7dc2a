"""Spelling: teach a model the letters of every token in its vocabulary, and of words built from them.

A model reads token ids, not letters. Large models still spell well, because their pretraining
text showed the letters of nearly every token somewhere (dictionaries, spelled-out words, typos).
A small course model read only ordinary text, so it has no token -> letters map, and the
strawberry experiment's "spell it out first" could only count over wrong spellings.

This module makes that map teachable with "Spell X." -> "x y z" conversations. The words come
from four sources, so that the skill is per *token* and transfers to words never seen:

- ``token``: a word that contains one chosen token of the vocabulary (drawn uniformly, so a rare
  token is practised as often as a common one: the coverage of the vocabulary);
- ``corpus``: a word of the pretraining corpus, as it appears there;
- ``invented``: a pronounceable made-up word (``llmkit.course.values.invented_word``);
- ``concat``: two to four random vocabulary pieces glued together (no language at all).

A word is always tokenized after a space (" cranberry"), as it is in a question. Words in
``excluded`` (the experiment's held-out and invented test words) are never drawn.
"""
from __future__ import annotations

import random
import re
from pathlib import Path

from llmkit.course.conversation_data import Conversation, Expected
from llmkit.course.values import invented_word
from llmkit.tokens.words import word_ids

WORD_SOURCES = ("token", "corpus", "invented", "concat")
SOURCE_WEIGHTS = (0.4, 0.2, 0.2, 0.2)  # the token words carry the coverage; the others its transfer
MAX_LETTERS = 24  # the longest held-out word, "ungarbarrylirryburirira", has 23
CONTEXTS_PER_TOKEN = 3  # words kept per token (several, so a token is not tied to one word)
SEARCH_TRIES = 200  # words tried per token before it is left uncovered


def spell(word: str) -> str:
    """The letters of ``word`` separated by spaces: "cranberry" -> "c r a n b e r r y"."""
    return " ".join(word)


def spell_conversation(word: str, split: str, *, kind: str = "spell", facts: dict | None = None) -> Conversation:
    """"Spell X." -> "x y z": the assistant writes the letters of ``word``, nothing else."""
    spelling = spell(word)
    messages = [{"role": "user", "content": f"Spell {word}."}, {"role": "assistant", "content": spelling}]
    return Conversation(kind, split, messages, None, None,
                        Expected(None, None, (spelling,), facts={"word": word, "spelling": spelling, **(facts or {})}))


def piece_text(tokenizer, token: int) -> str | None:
    """A token's text without its leading space, if it is made of ASCII letters only (else None)."""
    try:
        text = tokenizer.token_bytes(token).decode("utf-8")
    except (UnicodeDecodeError, KeyError, ValueError):
        return None
    text = text[1:] if text.startswith(" ") else text
    return text if text.isascii() and text.isalpha() else None


def spellable_tokens(tokenizer) -> list[int]:
    """Every ordinary token whose text is letters (with or without a leading space): what spelling covers."""
    special = set(tokenizer.special_tokens.values())
    return [t for t in range(tokenizer.vocab_size) if t not in special and piece_text(tokenizer, t) is not None]


def token_contexts(tokenizer, seed: int = 0) -> dict[int, list[str]]:
    """Up to ``CONTEXTS_PER_TOKEN`` words per spellable token whose tokenization contains that token.

    A *word-start* token is one a word can begin with (``word_start_tokens``): " berry" under
    GPT-4's pre-split, any letter token under the course's ``spaced`` one. Other tokens only ever
    appear inside a word, and only where the merges of the tokenizer produce them, so we search: a
    random word-start piece in front, sometimes a piece behind, until the tokenized word holds the
    token. A token never found is left out (``coverage`` says how many are in; for the shipped
    base model, all of them).
    """
    rng = random.Random(f"llmkit-spelling-contexts|{seed}")
    tokens = spellable_tokens(tokenizer)
    starting = word_start_tokens(tokenizer, tokens)
    starts = [piece_text(tokenizer, t) for t in tokens if t in starting]
    middles = [piece_text(tokenizer, t) for t in tokens if t not in starting]
    found: dict[int, list[str]] = {}
    for token in tokens:
        piece, is_start = piece_text(tokenizer, token), token in starting
        words: list[str] = []
        for attempt in range(SEARCH_TRIES):
            before = "" if is_start or attempt == 0 else _same_case(rng.choice(starts), piece)
            after = _same_case(rng.choice(middles or starts), piece) if attempt > 0 and rng.random() < 0.5 else ""
            word = before + piece + after
            if len(word) <= MAX_LETTERS and word not in words and token in word_ids(tokenizer, word):
                words.append(word)
                if len(words) == CONTEXTS_PER_TOKEN:
                    break
        if words:
            found[token] = words
    return found


def word_start_tokens(tokenizer, tokens: list[int]) -> set[int]:
    """The tokens a word said after a space begins with: the token's letters, read as a word inside
    a sentence (``llmkit.tokens.words.word_ids``), start with the token itself."""
    starting = set()
    for token in tokens:
        ids = word_ids(tokenizer, piece_text(tokenizer, token))
        if ids and ids[0] == token:
            starting.add(token)
    return starting


def _same_case(text: str, like: str) -> str:
    """``text`` in the case of ``like`` (upper for an all-caps piece), so a word keeps one style."""
    return text.upper() if like.isupper() and len(like) > 1 else text.lower()


def corpus_words(path: str | Path, limit: int = 20000) -> list[str]:
    """The distinct words of a text file (letters only, 2 to ``MAX_LETTERS`` long), most frequent first."""
    counts: dict[str, int] = {}
    for word in re.findall(rf"[A-Za-z]{{2,{MAX_LETTERS}}}", Path(path).read_text(encoding="utf-8")):
        counts[word] = counts.get(word, 0) + 1
    return sorted(counts, key=lambda w: -counts[w])[:limit]


class WordSampler:
    """Training words from the four ``WORD_SOURCES``, never one of ``excluded`` (compared without case).

    ``contexts``: ``token_contexts`` of the tokenizer; ``corpus``: ``corpus_words`` of the pretraining
    text. The same (seed, index) gives the same word in every process.
    """

    def __init__(self, tokenizer, contexts: dict[int, list[str]], corpus: list[str], excluded: set[str]):
        self.excluded = {w.casefold() for w in excluded}
        self.contexts = {t: [w for w in ws if w.casefold() not in self.excluded] for t, ws in contexts.items()}
        self.contexts = {t: ws for t, ws in self.contexts.items() if ws}
        self.context_tokens = sorted(self.contexts)
        self.corpus = [w for w in corpus if w.casefold() not in self.excluded]
        self.pieces = [piece_text(tokenizer, t) for t in spellable_tokens(tokenizer)]
        if not self.corpus or not self.context_tokens:
            raise ValueError("WordSampler needs corpus words and token contexts; is the corpus file empty?")

    def draw(self, rng: random.Random, source: str | None = None) -> tuple[str, str]:
        """One ``(word, source)``; ``source`` picks one of ``WORD_SOURCES`` (default: at random, weighted)."""
        source = source or rng.choices(WORD_SOURCES, SOURCE_WEIGHTS)[0]
        while True:
            if source == "token":
                word = rng.choice(self.contexts[rng.choice(self.context_tokens)])
            elif source == "corpus":
                word = rng.choice(self.corpus)
            elif source == "invented":
                word = invented_word(rng, "train", (1, 5))
            elif source == "concat":
                word = "".join(rng.choice(self.pieces) for _ in range(rng.randint(2, 4))).lower()
            else:
                raise ValueError(f"source must be one of {WORD_SOURCES}, got {source!r}")
            if len(word) <= MAX_LETTERS and word.casefold() not in self.excluded:
                return word, source

    def lowercase(self, rng: random.Random) -> str:
        """A lower-case training word (counting questions are about lower-case words, like the test's)."""
        return self.draw(rng)[0].lower()


def spelling_source(sampler: WordSampler, heldout_words: list[str]):
    """``(n, split, seed) -> "Spell X." conversations`` for ``llmkit.training.finetune``: training
    words from ``sampler``; the "heldout" split (the held-out loss) spells ``heldout_words``."""
    def source(n: int, split: str, seed: int) -> list[Conversation]:
        rng = random.Random(f"llmkit-spelling|{split}|{seed}")
        if split == "heldout":
            return [spell_conversation(rng.choice(heldout_words), split) for _ in range(n)]
        return [spell_conversation(sampler.draw(rng)[0], split) for _ in range(n)]
    return source


def coverage(tokenizer, sampler: WordSampler) -> float:
    """The share of spellable tokens the sampler's token words teach."""
    return len(sampler.context_tokens) / len(spellable_tokens(tokenizer))
