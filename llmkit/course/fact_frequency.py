"""The fact-frequency experiment: how often must a fact appear in training before a model recalls it?

Source note 001 says a model stores the facts it saw often and *reconstructs* the rare ones by
pattern, and that a reconstruction reads exactly as fluently as a memory. We test it on a small
model trained from scratch. The corpus is Shakespeare plus register entries about invented people
(names made of random syllables); every person has three facts (a birth city from a pool of real
cities, a profession, a birth year), and every fact of a person appears exactly ``k`` times, for
``k`` in ``MENTION_BINS`` (1, 2, 4, ..., 512). The sentences vary their opening, so the frame
("... was born in the city of <city>.") is learned from the many people; only the value must be
memorised.

Each fact is then asked as a cloze prompt with an opening never seen in training ("Few now
remember that Orlen Vask was born in the city of") and answered greedily. Per bin we measure
recall (the exact value) and, for the wrong answers, how often they are still fluent: a real member
of the pool ending a well-formed sentence, the shape of a memory without its content.
"""
from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass

import time
from pathlib import Path

import torch

from llmkit.course.entities import varied_syllable
from llmkit.files import atomic_write
from llmkit.generation.generate import generate
from llmkit.model.transformer import Transformer
from llmkit.paths import data_path
from llmkit.tokens.tokenizer import Tokenizer
from llmkit.training.config import TrainConfig
from llmkit.training.data import DOCUMENT_SEPARATOR, load_tokens
from llmkit.training.train import train

MENTION_BINS = tuple(2 ** i for i in range(10))  # 1, 2, 4, ..., 512 mentions of each fact
# few people where each costs 512 sentences per fact, many where a person costs one
PERSONS_PER_BIN = {1: 24, 2: 20, 4: 16, 8: 12, 16: 10, 32: 8, 64: 6, 128: 5, 256: 4, 512: 4}

CITIES = ("Lisbon", "Vienna", "Prague", "Dublin", "Naples", "Bergen", "Krakow", "Seville", "Lyon",
          "Antwerp", "Geneva", "Bristol", "Florence", "Hamburg", "Porto", "Turin", "Ghent", "Riga",
          "Oslo", "Madrid", "Athens", "Cairo", "Boston", "Quebec")
PROFESSIONS = ("baker", "weaver", "sailor", "carpenter", "potter", "tailor", "miller", "clockmaker",
               "blacksmith", "glassblower", "printer", "shoemaker", "fisherman", "bookbinder", "mason",
               "brewer", "cooper", "saddler", "chandler", "tanner")
YEARS = (1700, 1899)  # birth years are drawn from this range, both ends included

RELATIONS = ("city", "profession", "year")
# the words right before the value, in training and in the question alike
CUES = {"city": "was born in the city of", "profession": "worked as a", "year": "was born in the year"}
# every training sentence opens with one of these; the questions open with one never trained on
TRAIN_OPENINGS = ("", "It is written that ", "The records say that ", "As every neighbour knew, ",
                  "Long ago, ", "They say that ", "In the parish book, ", "By all accounts, ")
QUESTION_OPENINGS = ("Few now remember that ", "An old letter tells us that ", "According to the town clerk, ")


@dataclass(frozen=True)
class Person:
    """An invented person whose every fact appears ``mentions`` times in the training corpus."""

    name: str
    mentions: int
    facts: dict[str, str]  # relation -> value


@dataclass(frozen=True)
class Question:
    """One fact asked as a cloze prompt, the expected value, and how often training stated it."""

    name: str
    relation: str
    mentions: int
    prompt: str
    expected: str


def check_persons_per_bin(persons_per_bin: dict[int, int]) -> dict[int, int]:
    """The bins must be exactly ``MENTION_BINS``, each with at least one person."""
    if not isinstance(persons_per_bin, dict) or sorted(persons_per_bin) != list(MENTION_BINS):
        raise ValueError(f"persons_per_bin needs one entry per bin {MENTION_BINS}, got {persons_per_bin!r}")
    for k, n in persons_per_bin.items():
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"bin {k} needs a whole number of persons (at least 1), got {n!r}")
    return persons_per_bin


def invent_name(rng: random.Random, taken: set[str]) -> str:
    """A first name and a surname of two random syllables each, never one in ``taken``.

    Both halves are new to every other person too, so no two people share a name token sequence
    that could let one person's facts leak into another's answer.
    """
    while True:
        first, last = ("".join(varied_syllable(rng) for _ in range(2)).capitalize() for _ in range(2))
        if first not in taken and last not in taken and len(first) > 2 and len(last) > 2:
            taken.update((first, last))
            return f"{first} {last}"


def make_people(persons_per_bin: dict[int, int] = PERSONS_PER_BIN, seed: int = 0) -> list[Person]:
    """Invented people, ``persons_per_bin[k]`` of them mentioned ``k`` times; values drawn uniformly."""
    rng = random.Random(f"llmkit-fact-frequency|{seed}")
    check_persons_per_bin(persons_per_bin)
    taken = set(CITIES) | {p.capitalize() for p in PROFESSIONS}
    people = []
    for mentions in MENTION_BINS:
        for _ in range(persons_per_bin[mentions]):
            facts = {"city": rng.choice(CITIES), "profession": rng.choice(PROFESSIONS),
                     "year": str(rng.randint(*YEARS))}
            people.append(Person(invent_name(rng, taken), mentions, facts))
    return people


def fact_sentence(name: str, relation: str, value: str, rng: random.Random) -> str:
    """One training sentence stating one fact: a training opening, the name, a cue, the value."""
    return f"{rng.choice(TRAIN_OPENINGS)}{name} {CUES[relation]} {value}."


def mention_sentences(people: list[Person], seed: int = 0) -> list[str]:
    """Every fact of every person, ``person.mentions`` times each, shuffled across people."""
    rng = random.Random(f"llmkit-fact-sentences|{seed}")
    sentences = [fact_sentence(p.name, relation, p.facts[relation], rng)
                 for p in people for relation in RELATIONS for _ in range(p.mentions)]
    rng.shuffle(sentences)
    return sentences


def shakespeare_chunks(text: str, n_chars: int, seed: int = 0, chunk_chars: int = 1500) -> list[str]:
    """About ``n_chars`` of ``text`` as whole-paragraph chunks drawn from all over it, without repeats."""
    paragraphs = [p for p in text.split("\n\n") if p.strip() and DOCUMENT_SEPARATOR not in p]
    chunks, current = [], ""
    for paragraph in paragraphs:
        current = f"{current}\n\n{paragraph}" if current else paragraph
        if len(current) >= chunk_chars:
            chunks.append(current)
            current = ""
    random.Random(f"llmkit-fact-shakespeare|{seed}").shuffle(chunks)
    chosen, total = [], 0
    for chunk in chunks:
        if total >= n_chars:
            break
        chosen.append(chunk)
        total += len(chunk)
    if total < n_chars:
        raise ValueError(f"the mix needs {n_chars} characters of Shakespeare, the text holds only {total} in "
                         f"paragraphs; pass the whole corpus (data/corpus/train.txt) or a lower shakespeare_share")
    return chosen


def build_corpus(people: list[Person], shakespeare: str, *, shakespeare_share: float = 0.5,
                 sentences_per_entry: int = 8, seed: int = 0) -> str:
    """The training text: register entries about the people mixed with Shakespeare.

    An entry is a handful of sentences about different people, as in a town register; entries and
    Shakespeare chunks are shuffled together and separated by ``<|endoftext|>``. Shakespeare makes
    up ``shakespeare_share`` of the characters, so the model stays a language model of English
    rather than a lookup table of names.
    """
    if not 0.0 <= shakespeare_share < 1.0:
        raise ValueError(f"shakespeare_share must be in [0, 1), got {shakespeare_share}")
    sentences = mention_sentences(people, seed)
    entries = ["\n".join(sentences[i:i + sentences_per_entry]) for i in range(0, len(sentences), sentences_per_entry)]
    register_chars = sum(len(e) for e in entries)
    wanted = int(register_chars * shakespeare_share / (1.0 - shakespeare_share))
    documents = entries + shakespeare_chunks(shakespeare, wanted, seed)
    random.Random(f"llmkit-fact-corpus|{seed}").shuffle(documents)
    return DOCUMENT_SEPARATOR.join(documents) + DOCUMENT_SEPARATOR


def questions_for(people: list[Person], seed: int = 0) -> list[Question]:
    """Every fact of every person as a cloze prompt: a held-out opening, the name and the relation's cue."""
    rng = random.Random(f"llmkit-fact-questions|{seed}")
    return [Question(p.name, relation, p.mentions, f"{rng.choice(QUESTION_OPENINGS)}{p.name} {CUES[relation]}",
                     p.facts[relation]) for p in people for relation in RELATIONS]


def is_plausible(relation: str, value: str) -> bool:
    """Could ``value`` be a true answer for ``relation``? A city or profession of the pool, a year in range."""
    if relation == "city":
        return value in CITIES
    if relation == "profession":
        return value in PROFESSIONS
    return value.isdigit() and len(value) == 4 and YEARS[0] <= int(value) <= YEARS[1]


def parse_answer(completion: str) -> tuple[str, bool]:
    """The value a completion gives and whether it ends a well-formed sentence.

    Well-formed: a space, one to three words (letters or digits) and a full stop, as in every
    training sentence (" Lisbon."). Anything else, such as a line of verse or a run-on phrase, is
    not; its answer is then the completion's first line, stripped.
    """
    match = re.match(r" ([A-Za-z0-9]+(?: [A-Za-z0-9]+){0,2})\.", completion)
    if match:
        return match.group(1), True
    return completion.strip().split("\n")[0].strip(), False


@torch.no_grad()
def ask(model: Transformer, tokenizer: Tokenizer, question: Question, max_new_tokens: int = 10) -> dict:
    """The model's greedy answer to one question, scored, with the probability it gave its answer.

    The prompt starts a fresh document (``<|endoftext|>`` first), so nothing but the weights can
    supply the fact. ``answer_probability`` multiplies the probabilities of the answer's tokens up
    to its full stop: high means the model was sure, whether it was right or not.
    """
    separator = tokenizer.special_tokens[DOCUMENT_SEPARATOR]
    prompt = [separator, *tokenizer.encode_ordinary(question.prompt)]
    generation = generate(model, prompt, max_new_tokens=max_new_tokens, keep_logits=True, tokenizer=tokenizer,
                          stop_tokens=[separator])
    completion = tokenizer.decode(generation.tokens)
    answer, well_formed = parse_answer(completion)
    probabilities = torch.softmax(generation.logits.float(), dim=-1)
    probability = 1.0
    for step, token in enumerate(generation.tokens):
        probability *= probabilities[step, token].item()
        if "." in tokenizer.decode([token]):
            break
    correct = answer == question.expected
    return {"name": question.name, "relation": question.relation, "mentions": question.mentions,
            "prompt": question.prompt, "expected": question.expected, "completion": completion,
            "answer": answer, "correct": correct, "well_formed": well_formed,
            "plausible": is_plausible(question.relation, answer),
            "fluent": well_formed and is_plausible(question.relation, answer),
            "answer_probability": round(probability, 4)}


def majority_guess(people: list[Person]) -> dict[str, str]:
    """Per relation, the value the corpus states most often: what a model that knows no one would say."""
    guesses = {}
    for relation in RELATIONS:
        counts = Counter()
        for person in people:
            counts[person.facts[relation]] += person.mentions
        guesses[relation] = counts.most_common(1)[0][0]
    return guesses


def _fraction(hits: int, total: int) -> float | None:
    return round(hits / total, 3) if total else None


def summarise(rows: list[dict], people: list[Person]) -> list[dict]:
    """One entry per bin: n, recall, fluent_when_wrong, per-relation recall and the majority-guess baseline.

    ``fluent_when_wrong`` is None for a bin with no wrong answer (nothing to judge).
    ``majority_guess_recall`` is the recall of always answering the corpus's most frequent value:
    a bin's recall near it means the model knows nothing about those people.
    """
    guesses = majority_guess(people)
    bins = []
    for mentions in MENTION_BINS:
        here = [r for r in rows if r["mentions"] == mentions]
        wrong = [r for r in here if not r["correct"]]
        bins.append({
            "mentions": mentions, "n": len(here),
            "recall": _fraction(sum(r["correct"] for r in here), len(here)),
            "fluent_when_wrong": _fraction(sum(r["fluent"] for r in wrong), len(wrong)),
            "recall_by_relation": {rel: _fraction(sum(r["correct"] for r in here if r["relation"] == rel),
                                                  sum(r["relation"] == rel for r in here)) for rel in RELATIONS},
            "majority_guess_recall": _fraction(sum(guesses[r["relation"]] == r["expected"] for r in here), len(here)),
        })
    return bins


def confident_wrong_example(rows: list[dict]) -> dict | None:
    """The rarest-bin wrong answer that is fluent and given with the highest probability, for the notebook."""
    candidates = [r for r in rows if not r["correct"] and r["fluent"]]
    if not candidates:
        return None
    return min(candidates, key=lambda r: (r["mentions"], -r["answer_probability"]))


# --- the whole experiment: corpus, training from scratch, questions, results ---------------------------

FULL_MODEL = {"family": "llama", "context_length": 128, "d_model": 128, "n_layers": 4, "n_heads": 4, "dropout": 0.0}
QUICK_MODEL = {"family": "llama", "context_length": 64, "d_model": 64, "n_layers": 2, "n_heads": 2, "dropout": 0.0}
QUICK_PERSONS = {k: 1 for k in MENTION_BINS}  # one person per bin: a corpus of ~140k tokens


def experiment_config(out_dir: Path, *, steps: int, quick: bool, threads: int | None, device: str) -> TrainConfig:
    """The pretraining run: a small model from scratch on the experiment's corpus, no dropout.

    Dropout is off because memorising is the point; held-out Shakespeare is scored only at the
    start and the end (it is the slow part of a report), and the sample shows a held-out question.
    """
    tokenizer = str(data_path("models", "base", "tokenizer.json"))
    return TrainConfig(model=QUICK_MODEL if quick else FULL_MODEL, tokenizer=tokenizer,
                       train_corpus=str(out_dir / "train.txt"), heldout_corpus=str(out_dir / "heldout.txt"),
                       out_dir=str(out_dir), seed=1337, batch_size=8 if quick else 32, max_steps=steps,
                       learning_rate=3e-3, min_learning_rate=3e-4, warmup_steps=max(1, min(50, steps // 10)),
                       log_every=max(1, steps // 20), eval_every=steps, checkpoint_every=steps,
                       sample_prompt=QUESTION_OPENINGS[0], sample_tokens=24, device=device, threads=threads)


def run_experiment(out_dir: str | Path, *, steps: int, quick: bool = False, threads: int | None = None,
                   device: str = "auto", seed: int = 0, progress: bool = True) -> dict:
    """Build the corpus, train from scratch, ask every fact; returns the results (``bins`` and more).

    Writes the corpus and the run (checkpoint, log, model) into ``out_dir``; the caller saves the
    returned results where it wants them.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    people = make_people(QUICK_PERSONS if quick else PERSONS_PER_BIN, seed)
    shakespeare = data_path("corpus", "train.txt").read_text(encoding="utf-8")
    atomic_write(out_dir / "train.txt", build_corpus(people, shakespeare, seed=seed))
    heldout = data_path("corpus", "heldout.txt").read_text(encoding="utf-8")[:20_000 if not quick else 4_000]
    atomic_write(out_dir / "heldout.txt", heldout)
    cfg = experiment_config(out_dir, steps=steps, quick=quick, threads=threads, device=device)
    started = time.perf_counter()
    model = train(cfg, progress=progress)
    train_seconds = time.perf_counter() - started
    tokenizer = Tokenizer.load(cfg.tokenizer)
    model.eval()
    rows = [ask(model, tokenizer, question) for question in questions_for(people, seed)]
    corpus_tokens = len(load_tokens(cfg.train_corpus, cfg.tokenizer))
    trained_tokens = steps * cfg.batch_size * cfg.model["context_length"]
    settings = {"steps": steps, "quick": quick, "model": cfg.model, "batch_size": cfg.batch_size, "seed": seed,
                "corpus_tokens": corpus_tokens, "epochs": round(trained_tokens / corpus_tokens, 2),
                "persons_per_bin": {str(k): n for k, n in sorted(Counter(p.mentions for p in people).items())},
                "majority_guess": majority_guess(people)}
    return {"bins": summarise(rows, people), "example": confident_wrong_example(rows), "settings": settings,
            "train_minutes": round(train_seconds / 60, 2), "answers": rows}


__all__ = ["CITIES", "CUES", "MENTION_BINS", "PERSONS_PER_BIN", "PROFESSIONS", "QUESTION_OPENINGS", "RELATIONS",
           "TRAIN_OPENINGS", "YEARS", "Person", "Question", "ask", "build_corpus", "confident_wrong_example",
           "fact_sentence", "is_plausible", "majority_guess", "make_people", "mention_sentences", "parse_answer",
           "questions_for", "run_experiment", "summarise"]
