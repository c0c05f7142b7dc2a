"""The lookups' name tokens (the ``which`` kind's thinking): found exactly, weighted in the loss, and only in
the training split."""
import dataclasses

import pytest
import torch

from llmkit.course.lookups import lookup_name_positions, lookup_weights, thinking_notes
from llmkit.course.recipe_training import conversation_source, finetune_stage
from llmkit.course.skills import make_skill, make_skills
from llmkit.training.loop import lm_loss
from llmkit.training.sft import pad_batch


def test_the_positions_spell_every_name_a_lookup_writes_in_order(tokenizer):
    for seed in range(12):
        c = make_skill("which", "train", seed)
        ids = c.render(tokenizer).ids
        names = [line.split(" -> ")[1] for note in thinking_notes(c.messages) for line in note.split("\n")]
        assert len(names) >= 2
        positions = lookup_name_positions(tokenizer, ids, c.messages)
        assert tokenizer.decode([ids[p] for p in positions]).replace(" ", "") == "".join(names)
        assert positions == sorted(positions)


def test_a_weighted_conversation_keeps_its_ids_and_weights_only_the_lookup_names(tokenizer):
    c = make_skill("which", "train", 4)
    plain = c.render(tokenizer)
    weighted = dataclasses.replace(c, lookup_weight=4.0).render(tokenizer)
    assert weighted.ids == plain.ids and plain.mask == [bool(w) for w in weighted.mask]
    names = set(lookup_name_positions(tokenizer, plain.ids, c.messages))
    assert names and all(weighted.mask[p] == 4.0 for p in names)
    assert all(w == float(m) for p, (w, m) in enumerate(zip(weighted.mask, plain.mask)) if p not in names)


def test_weights_must_be_positive_and_fall_on_assistant_tokens(tokenizer):
    c = make_skill("which", "train", 4)
    r = c.render(tokenizer)
    with pytest.raises(ValueError, match="positive"):
        lookup_weights(tokenizer, r.ids, r.mask, c.messages, 0)
    with pytest.raises(ValueError, match="not one the assistant wrote"):
        lookup_weights(tokenizer, r.ids, [False] * len(r.mask), c.messages, 2.0)


def test_a_weighted_mask_makes_the_loss_a_weighted_mean(tokenizer):
    rows = [[1, 2, 3, 4, 5], [6, 7, 8]]
    batch = pad_batch(rows, [[0.0, 1.0, 3.0, 0.0, 1.0], [0.0, 1.0, 1.0]], pad_id=0, context_length=16)
    assert batch.mask.dtype == torch.float32 and batch.mask.tolist() == [[1.0, 3.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0]]
    plain = pad_batch(rows, [[False, True, True, False, True], [False, True, True]], pad_id=0, context_length=16)
    assert plain.mask.dtype == torch.bool
    logits = torch.randn(2, 4, 10, generator=torch.Generator().manual_seed(0))
    nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), reduction="none")
    expected = (nll * batch.mask.flatten()).sum() / 7.0
    assert torch.allclose(lm_loss(logits, batch.targets, batch.mask), expected)


def test_the_source_weights_training_conversations_only(tokenizer):
    source = conversation_source(tokenizer, 1024, kinds=["tool"], lookup_weight=3.0)
    train, heldout = source(4, "train", 0), source(4, "heldout", 0)
    assert {c.lookup_weight for c in train} == {3.0} and {c.lookup_weight for c in heldout} == {1.0}
    assert [c.messages for c in train] == [c.messages for c in make_skills(4, split="train", seed=0, kinds=["tool"])]
    for bad in (0, -1.0, True, "2"):
        with pytest.raises(ValueError, match="lookup_weight"):
            conversation_source(tokenizer, 1024, lookup_weight=bad)


def test_a_dpo_stage_refuses_a_lookup_weight():
    with pytest.raises(ValueError, match="lookup_weight"):
        finetune_stage("dpo", None, resume=False, stop_after=None, progress=False, lookup_weight=2.0)


def test_length_groups_of_weighted_conversations_give_the_gradients_of_the_whole_batch(tokenizer):
    from llmkit.model.config import ModelConfig
    from llmkit.model.transformer import Transformer
    from llmkit.training.config import FinetuneConfig
    from llmkit.training.distributed import Processes
    from llmkit.training.loop import accumulate_gradients
    from llmkit.training.sft import length_groups

    conversations = [dataclasses.replace(c, lookup_weight=2.5) for c in make_skills(6, seed=2, kinds=["tool", "errands"])]
    procs, cfg = Processes(torch.device("cpu")), FinetuneConfig()

    def gradients(batch):
        torch.manual_seed(0)
        model = Transformer(ModelConfig.llama(vocab_size=tokenizer.vocab_size, context_length=1024, d_model=32,
                                              n_layers=2, n_heads=2))
        loss = accumulate_gradients(model, batch, lm_loss, cfg, procs)
        return loss, {name: p.grad.clone() for name, p in model.named_parameters()}

    whole_loss, whole = gradients(length_groups(conversations, tokenizer, 1024, 1))
    grouped_loss, grouped = gradients(length_groups(conversations, tokenizer, 1024, 3))
    assert torch.allclose(grouped_loss, whole_loss, atol=1e-5)
    for name in whole:
        assert torch.allclose(grouped[name], whole[name], atol=1e-5, rtol=1e-4), name


def test_which_conversations_look_up_each_asked_tool_on_its_own_line(tokenizer):
    for split in ("train", "unseen_phrasings_and_tools"):
        for seed in range(10):
            c = make_skill("which", split, seed)
            names = c.expected.facts["names"]
            assert 3 <= len(names) <= 5 and len(set(names)) == len(names) and not c.expected.calls
            assert set(names) <= {t.name for t in c.tools} and 4 <= len(c.tools) <= 6
            ids = c.render(tokenizer).ids
            spelled = tokenizer.decode([ids[p] for p in lookup_name_positions(tokenizer, ids, c.messages)])
            assert spelled.replace(" ", "") == "".join(names)
            answer = c.messages[-1]["content"][-1]["text"]
            assert all(name in answer for name in names)
