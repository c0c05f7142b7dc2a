"""The stage settings that shape the training conversations (and pairs) change those and nothing else."""
import pytest

OPEN_SETTINGS = [{"open_framing": True}, {"open_enums": True}, {"open_talk": True}]  # SFT and DPO take these
SETTINGS = OPEN_SETTINGS + [{"mix": {"chitchat": 1, "tool": 1}}]


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


SFT_ONLY = [{"mix": {"chitchat": 1, "tool": 1}}, {"lookup_weight": 2.0}, {"wider_phrasings": True}]


@pytest.mark.parametrize("setting", SFT_ONLY, ids=lambda s: next(iter(s)))
def test_a_preference_stage_refuses_what_only_shapes_sft(setting):
    from llmkit.course.recipe_training import finetune_stage

    class Config:
        base_model = "data/models/base"

    with pytest.raises(ValueError, match=next(iter(setting))):
        finetune_stage("dpo", Config(), resume=False, stop_after=None, progress=False, **setting)


@pytest.mark.parametrize("setting", OPEN_SETTINGS, ids=lambda s: next(iter(s)))
def test_an_open_setting_changes_the_training_pairs_only(setting):
    from llmkit.course.recipe_training import pair_source
    from llmkit.tokens.tokenizer import Tokenizer

    tokenizer = Tokenizer.load("data/models/base/tokenizer.json")
    plain, shaped = pair_source(tokenizer, 1024), pair_source(tokenizer, 1024, **setting)

    def seen(pairs) -> list:
        return [(p.prompt, p.tools, p.chosen, p.rejected) for p in pairs]
    assert seen(plain(8, "heldout", 3)) == seen(shaped(8, "heldout", 3))
    assert seen(plain(24, "train", 3)) != seen(shaped(24, "train", 3))


def test_a_greeting_share_changes_the_training_pairs_only():
    from llmkit.course.recipe_training import pair_source
    from llmkit.tokens.tokenizer import Tokenizer

    tokenizer = Tokenizer.load("data/models/base/tokenizer.json")
    plain, shaped = pair_source(tokenizer, 1024), pair_source(tokenizer, 1024, greetings=0.5)

    def seen(pairs) -> list:
        return [(p.prompt, p.tools, p.chosen, p.rejected) for p in pairs]
    assert seen(plain(8, "heldout", 3)) == seen(shaped(8, "heldout", 3))
    assert seen(plain(24, "train", 3)) != seen(shaped(24, "train", 3))


def test_an_sft_stage_refuses_a_greeting_share():
    from llmkit.course.recipe_training import finetune_stage

    class Config:
        base_model = "data/models/base"

    with pytest.raises(ValueError, match="greetings"):
        finetune_stage("sft", Config(), resume=False, stop_after=None, progress=False, greetings=0.2)
