"""data/experiments/tool_lookup/probe.py: the toy rows say what its README says they say."""
import random

import pytest

from experiment_script import load_experiment

probe = load_experiment("tool_lookup", "probe.py")
FORMATS = ["A", "AT", "DT", "DC", "DR", "KT"]


def _tool_block(ids):
    return ids[1:ids.index(probe.USER)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_scored_verb_is_the_requested_tools_verb(fmt):
    for seed in range(50):
        ids, start, marks, n = probe.example(fmt, "train", random.Random(seed))
        lines, line = [], []
        for token in _tool_block(ids):
            line.append(token)
            if token == probe.NL:
                lines.append(line)
                line = []
        assert len(lines) == n
        user = ids[ids.index(probe.USER) + 1:ids.index(probe.CALL)]
        wanted = [row for row in lines if any(user[i:i + 2] == row[j:j + 2] for i in range(len(user))
                                              for j in range(len(row)) if row[j] not in (probe.US, probe.COLON))]
        verb = ids[marks["verb"]]
        assert any(verb in row for row in wanted)  # the verb of a line that shares the user's two subject words
        assert ids[marks.get("call", marks["verb"])] == verb
        if "subj" in marks:
            subject = ids[marks["subj"]:marks["subj"] + 2]
            assert any(user[i:i + 2] == subject for i in range(len(user)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_held_out_tools_use_only_held_out_words_and_training_tools_never_do(fmt):
    held = set(probe.HELD_VERBS) | set(probe.HELD_SUBJ)
    for seed in range(50):
        train_ids = probe.example(fmt, "train", random.Random(seed))[0]
        heldout_ids = probe.example(fmt, "heldout", random.Random(seed))[0]
        assert not held & set(_tool_block(train_ids))
        names = {heldout_ids[i] for i in range(1, len(heldout_ids) - 1) if heldout_ids[i + 1] == probe.US}
        assert names and names <= held  # every name word before an underscore
