"""data/experiments/thinking_copy/measure.py: reads back exactly what a model thinks, and reports
the four held-out splits."""
from __future__ import annotations

import pytest

from llmkit.chat.template import render
from llmkit.course.skills import make_skills

from experiment_script import load_experiment
from scripted_model import ScriptedModel

pytestmark = pytest.mark.usefixtures("one_thread")


def _script():
    return load_experiment("thinking_copy", "measure.py")


@pytest.mark.parametrize("write_wanted", [True, False])
def test_written_thinking_is_what_the_model_wrote(tokenizer, tiny_llama, write_wanted):
    measure = _script()
    conversation = make_skills(1, split="unseen_phrasings", seed=3, kinds=["tool"])[0]
    wanted = conversation.messages[1]["content"][0]["thinking"]
    written = wanted if write_wanted else "tide level"
    prompt = render(tokenizer, conversation.prompt, tools=conversation.definitions, system=conversation.system).ids
    special = tokenizer.special_tokens
    script = [special["<|thinking|>"], *tokenizer.encode(written), special["<|end_thinking|>"]]
    config = tiny_llama(tokenizer.vocab_size, context_length=1024).config
    model = ScriptedModel(config, script, prompt_length=len(prompt)).eval()
    assert measure.written_thinking(model, tokenizer, conversation) == written
    assert (written == wanted) is write_wanted


def test_the_script_reports_four_splits_with_their_misses(tmp_path, tiny_llama, tokenizer):
    from llmkit.model.weights import save

    measure = _script()
    save(tiny_llama(tokenizer.vocab_size, context_length=1024), tmp_path)
    tokenizer.save(tmp_path / "tokenizer.json")
    results = measure.measure(tmp_path, n=2)
    assert tuple(results) == measure.SPLITS
    for r in results.values():
        assert r["copied"] + len(r["misses"]) == r["n"] == 2 and r["fraction"] == r["copied"] / 2
        assert all(set(m) == {"request", "wanted", "written"} for m in r["misses"])
