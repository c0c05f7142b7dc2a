"""The pre-split: a regular expression cuts text into chunks before BPE, and merges never cross them.

The named patterns are GPT-4's (cl100k_base) and GPT-2's, as tiktoken ships them, and the
course's own ``spaced``. All use possessive quantifiers (``++``), so the regex engine never
backtracks into a run it has matched and a chunk costs time in proportion to its length.

Why a pattern of our own: GPT-4's gives a word its leading space (" Pune"), so the same word has
other tokens where no space comes before it: in a JSON string (``"Pune"``) or a tool name
(``get_weather``). A large model learns that " Pune" and "Pune" spell the same; a small one
copies a value into a tool call by finding the same tokens earlier in its context, and cannot
when they differ (the course's 8.7M-parameter chat model, taught forced: 0.16 of such values
right, 0.78 of those whose tokens do occur earlier). ``spaced`` keeps every space and underscore
out of words, so a word is the same tokens in a sentence, a JSON string and a tool name, at the
price of about 45% more tokens for plain English.

A custom pattern is checked before use, because two mistakes are easy to make and costly to
miss. A pattern that does not match every character drops text (``\\w+`` alone turns
"Hello, World" into "HelloWorld"), and a repeated group inside a repeat (``(a|aa)+$``) can
backtrack for minutes on a few dozen characters. So a custom pattern must reproduce a probe
text exactly and finish quick probes within a time limit; and when it cuts real text, it runs
under a time limit that grows with the text and must give back every character.
"""
from __future__ import annotations

from collections.abc import Callable

import regex

# The pre-split regex of GPT-4's cl100k_base (as tiktoken ships it). Contractions, letters with
# at most one leading non-letter, numbers of at most 3 digits, punctuation runs, whitespace.
GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
# GPT-2's pre-split regex (tiktoken's r50k form): a word keeps at most one leading space.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
# The course's pattern: GPT-4's, except that a run of letters takes nothing before it, so spaces
# and underscores (punctuation here) stand apart and " Pune", "Pune" and "_Pune" share "Pune".
SPACED_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
NAMED_PATTERNS = {"gpt4": GPT4_PATTERN, "gpt2": GPT2_PATTERN, "spaced": SPACED_PATTERN}

# Every kind of character a pattern must keep: letters of several scripts, digits, punctuation,
# each kind of whitespace, contractions, emoji (with a joiner and a skin tone) and control bytes.
COVERAGE_PROBE = (
    "Hello, World 123! It's  naïve\tcafé.\r\n\n  Ωμέγα Привет مرحبا नमस्ते 日本語 한국어 "
    "x\u00a0y\u3000z 3.14159 'quoted' \"q\" {[(<>)]} a_b-c/d\\e 👍🏽 👨‍👩‍👧 \x00\x07\x7f ~`@#$%^&*+=|;:?  "
)
# Runs of one kind of character ended by another: where a backtracking pattern blows up.
BACKTRACK_PROBES = [run * 30 + end for run in "aA1 !\n_é日" for end in "!a \x00"]
PROBE_SECONDS = 0.25
BASE_SECONDS, SECONDS_PER_MB = 1.0, 10.0  # time limit for a custom pattern on real text


def resolve_pattern(pattern: str | None) -> str | None:
    """Turn "gpt4" / "gpt2" / "spaced" / a custom regex / None (no pre-split) into the regex text.

    A custom regex is compiled and probed (see the module docstring); a pattern that drops text
    or backtracks catastrophically is refused with a ``ValueError`` that says how to fix it.
    """
    if pattern is None:
        return None
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be 'gpt4', 'gpt2', None or a regex string, not {type(pattern).__name__}")
    pattern = NAMED_PATTERNS.get(pattern, pattern)
    try:
        compiled = regex.compile(pattern)
    except regex.error as exc:
        raise ValueError(f"pattern {pattern!r} is not a valid regex for the `regex` package: {exc}") from exc
    if pattern not in NAMED_PATTERNS.values():
        _probe(pattern, compiled)
    return pattern


def _probe(pattern: str, compiled: regex.Pattern) -> None:
    for probe in BACKTRACK_PROBES:
        try:
            compiled.findall(probe, timeout=PROBE_SECONDS)
        except TimeoutError:
            raise ValueError(_slow_message(pattern, f"a {len(probe)}-character probe {probe!r}")) from None
    if compiled.groups:
        raise ValueError(
            f"the pre-split pattern {pattern!r} has a capturing group, so splitting would keep only the "
            f"group's text; write groups as non-capturing (?:...)"
        )
    chunks = compiled.findall(COVERAGE_PROBE, timeout=PROBE_SECONDS)
    if "".join(chunks) != COVERAGE_PROBE:
        raise ValueError(_dropped_message(pattern, COVERAGE_PROBE, chunks))


def splitter(pattern: str | None) -> Callable[[str], list[str]]:
    """A function that cuts text into chunks with the resolved ``pattern``, every occurrence in order.

    ``None`` keeps a non-empty text whole. The named patterns run as they are (the hot path);
    a custom one runs under a time limit and must give back every character.
    """
    pattern = resolve_pattern(pattern)
    if pattern is None:
        return lambda text: [text] if text else []
    findall = regex.compile(pattern).findall
    if pattern in NAMED_PATTERNS.values():
        return findall

    def split_checked(text: str) -> list[str]:
        limit = BASE_SECONDS + SECONDS_PER_MB * len(text) / 1e6
        try:
            chunks = findall(text, timeout=limit)
        except TimeoutError:
            raise ValueError(_slow_message(pattern, f"{len(text):,} characters of text ({limit:.0f} s)")) from None
        if sum(map(len, chunks)) != len(text):
            raise ValueError(_dropped_message(pattern, text, chunks))
        return chunks

    return split_checked


def _slow_message(pattern: str, what: str) -> str:
    return (
        f"the pre-split pattern {pattern!r} did not finish on {what}: it backtracks catastrophically "
        f"(typically a repeated group inside a repeat, such as (a|aa)+). Rewrite it with possessive "
        f"quantifiers (a++) or atomic groups (?>...), or use pattern='gpt4'"
    )


def _dropped_message(pattern: str, text: str, chunks: list[str]) -> str:
    kept = "".join(chunks)
    return (
        f"the pre-split pattern {pattern!r} does not match every character, so encoding would lose text: "
        f"{text[:60]!r} comes back as {kept[:60]!r}. Add an alternative that matches anything left "
        f"over, e.g. end the pattern with |\\s+|[^\\s]"
    )
