"""Write ``data/corpus/dictionary.txt``: modern English from WordNet's glosses, one entry a line.

Shakespeare's plays teach the base model English of 1600. A learner writes "Umbrella for Oslo
tomorrow?", and the chat model meets that kind of sentence first in fine-tuning. WordNet 3.0 gives
about 117,000 short definitions and 48,000 example sentences in present-day English, under a
licence that lets us ship them (the notice is in ``dictionary_LICENSE.txt``). We keep the 33,000
entries that have an example sentence (4 MB, about the size of the plays): they are the words in
common use, and the examples are sentences people say. Each line reads like a dictionary entry::

    fold, folding (noun): the act of folding. "he gave the napkins a double fold"

The headword comes back in the example, so an entry is also a small lesson in copying a word from
earlier in the text. Rebuild (Debian/Ubuntu)::

    apt-get install wordnet-base && python data/corpus/dictionary.py

The output is sorted by WordNet's own order, so the same package version writes the same bytes.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
from pathlib import Path

WORDNET = Path("/usr/share/wordnet")
PARTS_OF_SPEECH = {"noun": "noun", "verb": "verb", "adj": "adjective", "adv": "adverb"}
QUOTED = re.compile(r'"([^"]+)"')


def entry(line: str, part_of_speech: str) -> str | None:
    """One WordNet data line as ``words (part of speech): definition. "example" ...``; None for a
    line that is not a synset (the licence header starts with spaces)."""
    if line.startswith("  ") or " | " not in line:
        return None
    fields, gloss = line.split(" | ", 1)
    parts = fields.split()
    count = int(parts[3], 16)  # the number of words in the synset, in hex
    words = [re.sub(r"\(\w+\)$", "", w).replace("_", " ") for w in parts[4:4 + 2 * count:2]]
    examples = QUOTED.findall(gloss)
    definition = QUOTED.sub("", gloss).strip().strip(";").strip()
    definition = re.sub(r"\s*;\s*(;\s*)*", "; ", definition).strip("; ")
    text = f"{', '.join(dict.fromkeys(words))} ({part_of_speech}): {definition}."
    return " ".join([text] + [f'"{e.strip()}"' for e in examples])


def entries(wordnet: Path = WORDNET) -> list[str]:
    """Every synset of the four parts of speech that has an example sentence, in file order."""
    lines = []
    for suffix, name in PARTS_OF_SPEECH.items():
        with open(wordnet / f"data.{suffix}", encoding="utf-8") as f:
            lines += [e for e in (entry(line, name) for line in f) if e and e.endswith('"')]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wordnet", type=Path, default=WORDNET, help="WordNet's dict folder")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("dictionary.txt"))
    args = parser.parse_args()
    text = "\n".join(entries(args.wordnet)) + "\n"
    args.out.write_text(text, encoding="utf-8")
    data = text.encode("utf-8")
    print(json.dumps({"entries": text.count("\n"), "bytes": len(data),
                      "sha256": hashlib.sha256(data).hexdigest()}))


if __name__ == "__main__":
    main()
