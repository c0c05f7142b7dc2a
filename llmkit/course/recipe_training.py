"""The recipe's fine-tuning data: skill conversations for SFT, skill preference pairs for DPO.

``llmkit.training.finetune`` runs SFT and DPO on whatever examples it is handed as a function
``(n, split, seed) -> examples``; these are the course's. Its "heldout" split is the hardest one
here, ``unseen_phrasings_and_tools``. A loss only says the model's guesses got likelier; whether
it can *do* the thing shows in use, so a stage may also name a ``probe``: at every report a few
greedy conversations per split are run through the harness and scored (``skill_probe``), and the
log gets the curve of when the model starts to read tools and requests it has never seen.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from llmkit.course.skill_preferences import make_skill_preferences
from llmkit.course.skills import make_skills

HELDOUT_SPLIT = "unseen_phrasings_and_tools"
PROBE_DEFAULTS = {"per_kind": 4, "kinds": ["tool", "multi", "missing", "memory"],
                  "splits": ["seen", "unseen_phrasings_and_tools"], "max_tokens": 64, "seed": 99,
                  "batch": 1,  # batch > 1: that many probe conversations decode together (evaluate_skills)
                  "teacher_forced": 40}  # conversations for forced_scores.teacher_forced_scores (0: none)
MAX_SKIPPED_SHARE = 0.5  # more examples than this too long for the context is a config error


def fitting(make: Callable[[int, int], list], n: int, length: Callable[[object], int], context: int,
            seed: int) -> list:
    """``n`` examples of at most ``context + 1`` tokens, drawing more rounds until there are enough.

    A generated conversation too long for a small model is skipped, never cut: a cut conversation
    would teach half an answer. If most do not fit, the config is wrong, and this says so rather
    than training on the short ones only (which would quietly drop the multi-tool kinds).
    """
    kept, skipped, round_ = [], 0, 0
    while len(kept) < n:
        for example in make(n, seed * 1000 + round_):
            if len(kept) == n:
                break
            if length(example) <= context + 1:
                kept.append(example)
            else:
                skipped += 1
        round_ += 1
        if skipped > 2 * n and skipped > MAX_SKIPPED_SHARE * (len(kept) + skipped):
            raise ValueError(f"{skipped} of {len(kept) + skipped} generated examples do not fit the model's "
                             f"{context}-token context; raise context_length or the tokenizer's vocab_size")
    return kept


def _split(split: str) -> str:
    return "train" if split == "train" else HELDOUT_SPLIT


def conversation_source(tokenizer, context: int, kinds=None, lookup_weight: float = 1.0,
                        wider_phrasings: bool = False, open_framing: bool = False, mix: dict | None = None,
                        open_enums: bool = False, open_talk: bool = False, open_forms: bool = False):
    """``(n, split, seed) -> skill conversations`` that fit ``context`` (for SFT).

    ``lookup_weight`` weights the names the lookups write in the training loss
    (``lookups.lookup_weights``); the held-out conversations keep weight 1, so the held-out loss
    stays comparable between runs. ``wider_phrasings``: the training conversations use the phrasing
    pieces written after the skills stage (``phrasing_pools``); ``open_framing``: half their
    generated-tool requests take their connecting words from an open pool (``open_framing``);
    ``open_enums``: their tools' enums and booleans are named, and enums' options drawn, like other
    tool words; ``open_talk``: half their requests take the talk around them from an open pool
    (``open_talk``); ``open_forms``: half their requests have words of their form swapped, dropped or
    added (``open_forms``); ``mix`` draws the training kinds by other shares than ``skills.MIX``. The held-out
    conversations never change.
    """
    if isinstance(lookup_weight, bool) or not isinstance(lookup_weight, (int, float)) or not lookup_weight > 0:
        raise ValueError(f"lookup_weight must be a positive number, got {lookup_weight!r}")

    def weighted(conversations: list) -> list:
        return [replace(c, lookup_weight=float(lookup_weight)) for c in conversations]

    def source(n: int, split: str, seed: int) -> list:
        train = split == "train"
        chosen = fitting(lambda k, s: make_skills(k, split=_split(split), seed=s, kinds=kinds,
                                                  wider_phrasings=wider_phrasings and train,
                                                  open_framing=open_framing and train, open_enums=open_enums and train,
                                                  open_talk=open_talk and train, open_forms=open_forms and train,
                                                  mix=mix if train else None), n,
                         lambda c: len(c.render(tokenizer)), context, seed)
        return weighted(chosen) if train and lookup_weight != 1 else chosen
    return source


def pair_source(tokenizer, context: int, open_framing: bool = False, open_enums: bool = False,
                open_talk: bool = False, greetings: float = 0.0):
    """``(n, split, seed) -> skill preference pairs`` whose longer answer fits ``context`` (for DPO).

    The open data settings shape the training pairs as ``conversation_source``'s shape the SFT
    conversations; ``greetings`` is the share of training pairs on an introduction's greeting
    (``skill_preferences.greeting_preference``). The held-out pairs never change."""
    def length(pair) -> int:
        ids = pair.render(tokenizer)
        return len(ids["prompt"]) + max(len(ids["chosen"]), len(ids["rejected"]))

    def source(n: int, split: str, seed: int) -> list:
        train = split == "train"
        return fitting(lambda k, s: make_skill_preferences(k, split=_split(split), seed=s,
                                                           open_framing=open_framing and train,
                                                           open_enums=open_enums and train,
                                                           open_talk=open_talk and train,
                                                           greetings=greetings if train else 0.0),
                       n, length, context, seed)
    return source


def skill_probe(tokenizer, settings: dict | None = None) -> Callable:
    """``model -> {split: {score: fraction}}``: the same few greedy skill conversations each time.

    ``settings`` may change ``PROBE_DEFAULTS``: conversations ``per_kind``, the ``kinds`` and
    ``splits``, ``max_tokens`` per reply, the ``seed`` that draws the conversations, and how many
    ``teacher_forced`` conversations measure the choice of tool and the copying of arguments
    alone (they show a skill forming while greedy replies still fail for other reasons).
    """
    from llmkit.chat.client import Client
    from llmkit.course.forced_scores import teacher_forced_scores
    from llmkit.course.skill_scores import SCORES, evaluate_skills

    unknown = set(settings or {}) - set(PROBE_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown probe settings {sorted(unknown)}; use {sorted(PROBE_DEFAULTS)}")
    chosen = {**PROBE_DEFAULTS, **(settings or {})}

    def probe(model) -> dict:
        report = evaluate_skills(Client.from_model(model, tokenizer), per_kind=chosen["per_kind"],
                                 splits=chosen["splits"], kinds=chosen["kinds"], seed=chosen["seed"],
                                 max_tokens=chosen["max_tokens"], batch=chosen["batch"])
        figures = {split: {k: v for k, v in scores.items() if k in SCORES} for split, scores in report.items()}
        if chosen["teacher_forced"]:
            for split in chosen["splits"]:
                figures[split].update(teacher_forced_scores(model, tokenizer, split, n=chosen["teacher_forced"]))
        return figures
    return probe


def finetune_stage(stage: str, cfg, *, kinds=None, probe: dict | None = None, resume: bool, stop_after: int | None,
                   progress: bool, lookup_weight: float = 1.0, wider_phrasings: bool = False,
                   open_framing: bool = False, mix: dict | None = None, open_enums: bool = False,
                   open_talk: bool = False, greetings: float = 0.0, open_forms: bool = False) -> bool:
    """Run one SFT or DPO stage on the course's skill data; True when it finished (``model/`` written).

    ``probe``: settings for ``skill_probe`` (``{}`` for its defaults), or None for no probe;
    ``lookup_weight``, ``wider_phrasings``, ``open_framing``, ``mix``, ``open_enums``, ``open_talk``,
    ``open_forms``: see ``conversation_source`` (SFT only, but for open_framing, open_enums and open_talk,
    which ``pair_source`` takes too); ``greetings``: see ``pair_source`` (DPO only)."""
    from llmkit.tokens.tokenizer import Tokenizer
    from llmkit.training.finetune import finetune

    shaping = lookup_weight != 1 or wider_phrasings or mix is not None or open_forms
    if stage != "sft" and shaping:
        raise ValueError(f"lookup_weight, wider_phrasings, mix and open_forms shape SFT conversations; a {stage} stage "
                         f"cannot take them (it takes open_framing, open_enums and open_talk)")
    if stage == "sft" and greetings:
        raise ValueError("greetings is a share of DPO's preference pairs; an sft stage cannot take it "
                         "(put memory_open in its mix to train on more introductions)")
    tokenizer = Tokenizer.load(Path(cfg.base_model) / "tokenizer.json")
    context = _context_of(cfg.base_model)
    source = (conversation_source(tokenizer, context, kinds, lookup_weight, wider_phrasings, open_framing, mix,
                                  open_enums, open_talk, open_forms)
              if stage == "sft" else pair_source(tokenizer, context, open_framing, open_enums, open_talk, greetings))
    finetune(stage, cfg, source, resume=resume, stop_after=stop_after, progress=progress,
             probe=None if probe is None else skill_probe(tokenizer, probe))
    return stop_after is None or stop_after >= cfg.max_steps


def _context_of(model_dir: str) -> int:
    import json

    return json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))["context_length"]
