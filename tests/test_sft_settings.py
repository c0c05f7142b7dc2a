"""The SFT stage settings that shape the training conversations change those and nothing else."""
import pytest

SETTINGS = [{"open_framing": True}, {"open_enums": True}, {"open_talk": True}, {"mix": {"chitchat": 1, "tool": 1}}]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: next(iter(s)))
def test_a_setting_changes_the_training_conversations_only(setting):
    from llmkit.course.recipe_training import conversation_source
    from llmkit.tokens.tokenizer import Tokenizer

    tokenizer = Tokenizer.load("data/models/base/tokenizer.json")
    kinds = None if "mix" in setting else ["tool"]
    plain, shaped = (conversation_source(tokenizer, 1024, kinds, **extra) for extra in ({}, setting))

    def seen(conversations) -> list:
        return [(c.messages, c.definitions) for c in conversations]
    assert seen(plain(12, "heldout", 3)) == seen(shaped(12, "heldout", 3))
    assert seen(plain(30, "train", 3)) != seen(shaped(30, "train", 3))


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: next(iter(s)))
def test_a_preference_stage_refuses_it(setting):
    from llmkit.course.recipe_training import finetune_stage

    class Config:
        base_model = "data/models/base"

    with pytest.raises(ValueError, match=next(iter(setting))):
        finetune_stage("dpo", Config(), resume=False, stop_after=None, progress=False, **setting)
