"""A training mix other than ``skills.MIX``: kinds drawn by the shares a recipe stage names
(that it reaches the training conversations only: test_sft_settings.py)."""
from collections import Counter

import pytest

from llmkit.course.skills import MIX, checked_mix, make_skills


def test_the_default_mix_is_the_one_named_when_none_is_given():
    assert [c.messages for c in make_skills(40, seed=3)] == [c.messages for c in make_skills(40, seed=3, mix=MIX)]


def test_a_mix_draws_its_kinds_by_their_shares():
    drawn = Counter(c.kind for c in make_skills(400, seed=1, mix={"chitchat": 3, "memory": 1}))
    assert set(drawn) == {"chitchat", "memory"}
    assert 0.68 < drawn["chitchat"] / 400 < 0.82  # 0.75, within about three standard errors


@pytest.mark.parametrize("mix", [{}, {"gossip": 1}, {"tool": 0}, {"tool": -1}, {"tool": True}, {"tool": "2"},
                                 [("tool", 1)]])
def test_a_mix_that_is_not_kinds_to_positive_shares_is_refused(mix):
    with pytest.raises(ValueError, match="positive shares"):
        checked_mix(mix)
    with pytest.raises(ValueError, match="positive shares"):
        make_skills(2, mix=mix)


def test_kinds_and_a_mix_together_are_refused():
    with pytest.raises(ValueError, match="not both"):
        make_skills(2, kinds=["tool"], mix={"tool": 1})


def test_a_recipe_stage_names_a_bad_mix(tmp_path):
    from llmkit.course.recipe_stages import _finetune_config

    with pytest.raises(ValueError, match="the sft_skills stage: a mix"):
        _finetune_config({"max_steps": 1, "mix": {"tool": 0}}, tmp_path, tmp_path / "sft_skills", None)
