"""llmkit.training.finetune: the SFT mask, padding, the DPO loss, and tiny runs of both stages."""
import json
import math
from pathlib import Path

import pytest
import torch

from llmkit.course.conversations import make_conversations
from llmkit.course.preferences import make_preferences
from llmkit.course.recipe import ChatFinetuneConfig, finetune_chat
from llmkit.training.config import FinetuneConfig
from llmkit.training.dpo import answer_logprobs, dpo_loss, preference_batch
from llmkit.training.sft import conversation_batch, pad_batch
from llmkit.model.transformer import ModelConfig, Transformer
from llmkit.model.weights import save as save_weights
from llmkit.paths import data_path
from llmkit.tokens.tokenizer import Tokenizer
from llmkit.training.checkpoint import read_log
from llmkit.training.loop import lm_loss

TOKENIZER = data_path("models", "base", "tokenizer.json")


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.load(TOKENIZER)


def tiny_model(vocab_size: int, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(ModelConfig.llama(vocab_size=vocab_size, context_length=256, d_model=32, n_layers=2,
                                         n_heads=2))


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory, tokenizer) -> Path:
    """A tiny randomly initialised 'base model' folder that load_model opens."""
    folder = tmp_path_factory.mktemp("tiny_base")
    save_weights(tiny_model(tokenizer.vocab_size), folder)
    (folder / "tokenizer.json").write_bytes(TOKENIZER.read_bytes())
    return folder


# ------------------------------------------------------------------------------------------ SFT
def test_batch_mask_is_the_templates_assistant_mask_shifted(tokenizer):
    conversations = make_conversations(4, seed=1, kinds=["memory", "direct"])
    batch = conversation_batch(conversations, tokenizer, context_length=256)
    for row, conversation in enumerate(conversations):
        rendered = conversation.render(tokenizer)
        n = len(rendered) - 1
        assert batch.inputs[row, :n].tolist() == rendered.ids[:-1]
        assert batch.targets[row, :n].tolist() == rendered.ids[1:]
        assert batch.mask[row, :n].tolist() == rendered.mask[1:]
        assert not batch.mask[row, n:].any()  # padding teaches nothing
        trained_roles = {role for role, m in zip(rendered.roles[1:], rendered.mask[1:]) if m}
        assert trained_roles == {"assistant"}
    supervised = batch.targets[batch.mask].tolist()
    assert tokenizer.special_tokens["<|end_turn|>"] in supervised
    assert tokenizer.special_tokens["<|user|>"] not in supervised


def test_sft_loss_ignores_targets_outside_the_mask(tokenizer):
    batch = conversation_batch(make_conversations(2, seed=2, kinds=["weather", "memory"]), tokenizer, 256)
    model = tiny_model(tokenizer.vocab_size).eval()
    with torch.no_grad():
        logits = model(batch.inputs)
    loss = lm_loss(logits, batch.targets, batch.mask)
    free = (~batch.mask).nonzero()[5]  # a user / tool-result / pad position
    changed = batch.targets.clone()
    changed[tuple(free)] = (changed[tuple(free)] + 1) % tokenizer.vocab_size
    assert lm_loss(logits, changed, batch.mask).item() == loss.item()
    trained = batch.mask.nonzero()[3]
    changed[tuple(trained)] = (changed[tuple(trained)] + 1) % tokenizer.vocab_size
    assert lm_loss(logits, changed, batch.mask).item() != loss.item()


def test_all_masked_batch_gives_finite_loss_and_zero_gradient(tokenizer):
    batch = conversation_batch(make_conversations(2, seed=3, kinds=["direct"]), tokenizer, 256)
    model = tiny_model(tokenizer.vocab_size)
    loss = lm_loss(model(batch.inputs), batch.targets, torch.zeros_like(batch.mask))
    loss.backward()
    assert torch.isfinite(loss) and loss.item() == 0.0
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


def test_too_long_conversation_is_an_error_not_a_cut():
    with pytest.raises(ValueError, match="context"):
        pad_batch([list(range(20))], [[True] * 20], pad_id=0, context_length=16)


def test_config_rejects_unknown_keys_and_data():
    with pytest.raises(ValueError, match="did you mean 'max_steps'"):
        FinetuneConfig.from_dict({"max_step": 3})
    with pytest.raises(ValueError, match="unknown key 'data'"):  # which examples is the caller's business
        FinetuneConfig.from_dict({"data": "chat"})
    with pytest.raises(ValueError, match="strawberry"):
        ChatFinetuneConfig.from_dict({"data": "poems"})


# ------------------------------------------------------------------------------------------ DPO
def test_dpo_loss_is_ln2_when_policy_equals_reference():
    logps = torch.tensor([-12.0, -3.5, -40.0])
    loss, accuracy = dpo_loss(logps, logps - 1, logps, logps - 1, beta=0.1)
    assert loss.item() == pytest.approx(math.log(2))
    assert accuracy.item() == 0.0  # a tie is not a win


def test_dpo_loss_and_reward_accuracy_on_a_toy_case():
    reference_chosen, reference_rejected = torch.tensor([-10.0, -10.0]), torch.tensor([-10.0, -10.0])
    policy_chosen, policy_rejected = torch.tensor([-8.0, -11.0]), torch.tensor([-12.0, -9.0])
    loss, accuracy = dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta=0.5)
    margins = torch.tensor([0.5 * (2 - -2), 0.5 * (-1 - 1)])  # +2 for the first pair, -1 for the second
    assert loss.item() == pytest.approx(-torch.nn.functional.logsigmoid(margins).mean().item())
    assert accuracy.item() == 0.5


def test_dpo_positive_term_is_silent_while_the_chosen_answer_keeps_its_probability():
    reference_chosen, reference_rejected = torch.tensor([-10.0, -10.0]), torch.tensor([-10.0, -10.0])
    policy_chosen, policy_rejected = torch.tensor([-9.0, -10.0]), torch.tensor([-12.0, -13.0])  # chosen >= reference
    plain = dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta=0.1)
    positive = dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta=0.1,
                        positive_weight=50.0)
    assert positive[0].item() == pytest.approx(plain[0].item()) and positive[1].item() == plain[1].item()


def test_dpo_positive_term_makes_losing_the_chosen_answer_cost():
    # both answers fall, the rejected one further: plain DPO calls that progress (the margin grows)
    reference_chosen, reference_rejected = torch.tensor([-10.0]), torch.tensor([-10.0])
    policy_chosen = torch.tensor([-12.0], requires_grad=True)
    policy_rejected = torch.tensor([-16.0])
    grads = {}
    for weight in (0.0, 5.0):
        loss, accuracy = dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta=0.5,
                                  positive_weight=weight)
        grads[weight], = torch.autograd.grad(loss, policy_chosen)
        assert accuracy.item() == 1.0  # the rewards still order the pair: accuracy ignores the penalty
        if weight:
            expected_margin = 0.5 * (-2 - -6) - 0.5 * 5.0 * 2  # 2 nats below the reference, times beta * lambda
            assert loss.item() == pytest.approx(-torch.nn.functional.logsigmoid(torch.tensor(expected_margin)).item())
    # raising the chosen answer lowers the loss in both, but far more steeply with the penalty
    assert grads[0.0].item() < 0 and grads[5.0].item() < 5 * grads[0.0].item()


def test_dpo_heldout_scores_report_each_answers_reward(tokenizer):
    from llmkit.training.dpo import DPOObjective

    torch.manual_seed(0)
    model = Transformer(ModelConfig.llama(vocab_size=tokenizer.vocab_size, context_length=256, d_model=16,
                                          n_layers=1, n_heads=2))
    objective = DPOObjective(model, tokenizer, FinetuneConfig.from_dict({"beta": 0.1}), torch.device("cpu"))
    pairs = make_preferences(5, seed=4)
    same = objective.heldout_scores(model, pairs)  # the policy is the reference: every reward is 0
    assert same["chosen_reward"] == pytest.approx(0.0, abs=1e-5) and same["rejected_reward"] == pytest.approx(0.0, abs=1e-5)
    policy = Transformer(model.config)
    policy.load_state_dict(model.state_dict())
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.mul_(1.5)
    moved = objective.heldout_scores(policy, pairs)
    batch = preference_batch(pairs, tokenizer, 256)
    with torch.no_grad():
        mine = answer_logprobs(policy(batch.inputs), batch.targets, batch.mask)
        theirs = answer_logprobs(model(batch.inputs), batch.targets, batch.mask)
    assert moved["chosen_reward"] == pytest.approx(0.1 * (mine[:5] - theirs[:5]).mean().item(), rel=1e-4)
    assert moved["rejected_reward"] == pytest.approx(0.1 * (mine[5:] - theirs[5:]).mean().item(), rel=1e-4)


def test_answer_logprobs_sums_the_masked_positions():
    torch.manual_seed(0)
    logits, targets = torch.randn(2, 4, 7), torch.randint(0, 7, (2, 4))
    mask = torch.tensor([[False, True, True, False], [True, False, False, False]])
    logp = torch.log_softmax(logits, -1)
    expected = [logp[0, 1, targets[0, 1]] + logp[0, 2, targets[0, 2]], logp[1, 0, targets[1, 0]]]
    assert torch.allclose(answer_logprobs(logits, targets, mask), torch.stack(expected))


def test_preference_batch_puts_chosen_then_rejected(tokenizer):
    pairs = make_preferences(3, seed=4)
    batch = preference_batch(pairs, tokenizer, 256)
    assert batch.inputs.shape[0] == 6
    for i, pair in enumerate(pairs):
        ids = pair.render(tokenizer)
        assert batch.targets[i][batch.mask[i]].tolist() == ids["chosen"]
        assert batch.targets[i + 3][batch.mask[i + 3]].tolist() == ids["rejected"]


# ------------------------------------------------------------------------------------------ runs
@pytest.mark.slow
def test_tiny_sft_then_dpo_runs(tiny_base, tmp_path):
    common = dict(base_model=str(tiny_base), kinds=["direct", "memory"], batch_size=4, learning_rate=3e-3,
                  warmup_steps=2, log_every=2, heldout_examples=8, device="cpu", threads=1)
    sft = ChatFinetuneConfig.from_dict({**common, "out_dir": str(tmp_path / "sft"), "max_steps": 12, "eval_every": 12,
                                    "checkpoint_every": 12})
    finetune_chat("sft", sft, progress=False)
    evals = [r["heldout_loss"] for r in read_log(tmp_path / "sft" / "train_log.jsonl") if r["kind"] == "eval"]
    assert len(evals) == 2 and evals[-1] < evals[0] - 0.5  # from ~ln(2048) = 7.6 nats towards the template
    assert (tmp_path / "sft" / "model" / "tokenizer.json").is_file()

    dpo = ChatFinetuneConfig.from_dict({**common, "kinds": ["memory"], "base_model": str(tmp_path / "sft" / "model"),
                                    "out_dir": str(tmp_path / "dpo"), "max_steps": 4, "eval_every": 4,
                                    "checkpoint_every": 4, "learning_rate": 1e-3, "beta": 0.5})
    finetune_chat("dpo", dpo, progress=False)
    records = [r for r in read_log(tmp_path / "dpo" / "train_log.jsonl") if r["kind"] == "eval"]
    assert records[0]["heldout_loss"] == pytest.approx(math.log(2), abs=1e-4)  # policy = reference at step 0
    assert 0.0 <= records[-1]["heldout_reward_accuracy"] <= 1.0
    assert records[0]["heldout_chosen_reward"] == pytest.approx(0.0, abs=1e-4)  # policy = reference
    assert records[0]["train_chosen_reward"] is None and math.isfinite(records[-1]["train_chosen_reward"])
    assert math.isfinite(records[-1]["train_rejected_reward"])
    assert math.isfinite(records[-1]["heldout_loss"])
    assert json.loads((tmp_path / "dpo" / "dpo_config.json").read_text())["beta"] == 0.5


def test_fresh_entities_are_invented_real_and_never_heldout():
    from llmkit.course.conversations import CITIES, NAMES, words
    from llmkit.course.recipe import example_source

    heldout = set(CITIES["heldout"]) | set(NAMES["heldout"]) | set(words("heldout"))
    plain = make_conversations(60, split="train", seed=9)
    fresh = example_source("chat", None, fresh=1.0)(60, "train", 9)
    assert [c.kind for c in fresh] == [c.kind for c in plain]
    changed = 0
    for before, after in zip(plain, fresh):
        facts = after.expected.facts
        if after.kind == "weather":  # rebuilt: the tool result is the real one for the new city
            assert facts["city"] not in CITIES["train"] + CITIES["heldout"]
            assert json.loads(after.messages[2]["content"][0]["content"])["city"] == facts["city"]
        if after.kind == "letters":
            assert facts["word"] not in heldout and facts["count"] == facts["word"].count(facts["letter"])
        if after.kind == "memory":
            assert before.expected.facts["name"] not in str(after.messages)
        changed += after.messages != before.messages
        assert not any(value in str(after.messages) for value in heldout if len(value) > 3)
    assert changed >= 30
    assert example_source("chat", None, fresh=1.0)(6, "heldout", 9) == make_conversations(6, split="heldout", seed=9)


def test_fresh_conversation_that_does_not_fit_falls_back_to_the_original():
    from llmkit.course.recipe import example_source

    plain = make_conversations(12, split="train", seed=5)
    assert example_source("chat", None, fresh=1.0, fits=lambda c: False)(12, "train", 5) == plain


def test_set_dropout_turns_off_every_kind_of_dropout():
    """With dropout 0, training mode must compute exactly what eval mode does (no random masks
    left in attention, the residual branches or the embeddings)."""
    import torch

    from llmkit.training.sft import set_dropout
    from llmkit.model.transformer import ModelConfig, Transformer

    torch.manual_seed(0)
    config = ModelConfig.llama(vocab_size=64, context_length=16, d_model=32, n_layers=2, n_heads=4, dropout=0.3)
    model = Transformer(config)
    ids = torch.randint(0, 64, (2, 16))
    model.train()
    assert not torch.equal(model(ids), model(ids))  # the control: dropout really is on
    set_dropout(model, 0.0)
    assert model.config.dropout == 0.0
    with torch.no_grad():
        trained = model.train()(ids)
        evaluated = model.eval()(ids)
    torch.testing.assert_close(trained, evaluated, rtol=0, atol=0)


def test_dpo_sft_weight_adds_the_chosen_answers_next_token_loss():
    from llmkit.training.dpo import DPOObjective

    torch.manual_seed(0)
    reference = Transformer(ModelConfig.llama(vocab_size=32, context_length=8, d_model=16, n_layers=1, n_heads=2))
    logits, targets = torch.randn(4, 6, 32), torch.randint(0, 32, (4, 6))
    mask = torch.tensor([[0, 0, 1, 1, 1, 0]] * 2 + [[0, 0, 1, 1, 0, 0]] * 2, dtype=torch.bool)
    losses = {}
    for weight in (0.0, 0.5):
        cfg = FinetuneConfig.from_dict({"sft_weight": weight, "beta": 0.1})
        objective = DPOObjective(reference, None, cfg, torch.device("cpu"))
        objective.reference_logprobs = answer_logprobs(logits, targets, mask)  # policy == reference
        losses[weight] = objective.loss_fn(logits, targets, mask).item()
    chosen_nll = -answer_logprobs(logits, targets, mask)[:2].sum().item() / 6  # 3 answer tokens x 2 chosen rows
    assert losses[0.0] == pytest.approx(math.log(2), abs=1e-6)
    assert losses[0.5] == pytest.approx(math.log(2) + 0.5 * chosen_nll, rel=1e-5)


def test_varied_invented_names_use_many_different_tokens_and_never_heldout_ones():
    from llmkit.course.conversations import NAMES
    from llmkit.course.recipe import example_source

    tokenizer = Tokenizer.load(data_path("models", "base", "tokenizer.json"))
    source = example_source("chat", ["memory"], fresh=1.0, varied=True)
    names = {c.messages[1]["content"].removeprefix("Nice to meet you, ").rstrip("!") for c in source(200, "train", 1)}
    assert not names & set(NAMES["heldout"])
    pieces = {i for name in names for i in tokenizer.encode(" " + name)}
    assert len(names) > 150 and len(pieces) > 150  # a fixed syllable list gives only a few dozen pieces


def test_copy_words_draw_every_token_alike_and_never_a_heldout_value(tokenizer):
    import collections
    import random

    from llmkit.course.entities import CopyWords

    text = "the violet violent doe does goes foes ANYONE anyway Zebra zoo " * 3 + "Viola Anya Zoe Giraffe giraffe"
    lexicon = CopyWords(tokenizer, text, taken={"Viola", "Anya", "Zoe", "giraffe"})
    drawable = {w for words in lexicon.index.values() for w in words}
    assert not {"viola", "anya", "zoe", "giraffe"} & {w.lower() for w in drawable}  # in either case
    assert {"Violet", "Zebra", "Anyone"} <= drawable
    for token, words in lexicon.index.items():  # every word listed under a token is made of it
        assert all(token in tokenizer.encode_ordinary(" " + w) for w in words)
    rng, drawn = random.Random(0), collections.Counter()
    for _ in range(4000):
        drawn.update(set(tokenizer.encode_ordinary(" " + lexicon.draw(rng))))
    rarest = min(drawn[t] for t in lexicon.tokens)  # each token's own draws alone give it ~4000/len(tokens)
    assert rarest >= 0.5 * 4000 / len(lexicon.tokens)


def test_corpus_names_reach_tokens_that_syllables_miss(tokenizer):
    from llmkit.course.conversations import NAMES
    from llmkit.course.entities import CopyWords
    from llmkit.course.recipe import example_source

    def names_and_tokens(**kwargs):
        source = example_source("chat", ["memory"], fresh=1.0, varied=True, **kwargs)
        names = {c.messages[1]["content"].removeprefix("Nice to meet you, ").rstrip("!")
                 for seed in range(4) for c in source(100, "train", seed)}
        return names, {i for name in names for i in tokenizer.encode_ordinary(" " + name)}

    syllable_names, syllable_tokens = names_and_tokens()
    corpus_names, corpus_tokens = names_and_tokens(lexicon=CopyWords.for_corpus(tokenizer))
    assert not corpus_names & set(NAMES["heldout"])
    assert len(corpus_tokens - syllable_tokens) > 100


def test_every_kind_reaches_training_even_when_the_batch_is_smaller_than_the_list():
    """Kinds take turns from the first one; a 13-kind list with batches of 8 once trained on
    the first 8 kinds only (no "no_tool", "search" or "react" ever reached the model)."""
    import collections

    from llmkit.course.recipe import example_source
    from llmkit.training.sft import step_seed

    kinds = ["weather", "letters", "arithmetic", "memory", "memory", "memory", "memory", "memory",
             "no_tool", "no_tool", "direct", "search", "react"]
    source = example_source("chat", kinds)
    seen = collections.Counter(c.kind for step in range(13) for c in source(8, "train", step_seed(5, step)))
    assert set(seen) == set(kinds)
    assert seen["memory"] == 5 * seen["react"]  # the list's weights hold over a full rotation


def test_repeat_conversations_say_the_words_back_and_fresh_ones_invent_every_word(tokenizer):
    from llmkit.course.conversations import CITIES, NAMES, make_conversations, words
    from llmkit.course.entities import CopyWords
    from llmkit.course.recipe import example_source

    heldout = set(NAMES["heldout"]) | set(CITIES["heldout"]) | set(words("heldout"))
    for c in make_conversations(12, split="heldout", seed=3, kinds=["repeat"]):
        items = c.expected.facts["items"]
        assert 3 <= len(items) <= 6 and set(items) <= heldout
        assert c.messages[-1]["content"] == " ".join(items) and c.messages[0]["content"].endswith(" ".join(items))
    source = example_source("chat", ["repeat"], fresh=1.0, varied=True, lexicon=CopyWords.for_corpus(tokenizer))
    for c in source(40, "train", 5):
        said = c.messages[-1]["content"].split()
        assert said == c.expected.facts["items"] and not set(said) & heldout
        assert c.messages[0]["content"].endswith(c.messages[-1]["content"])


def test_every_shipped_config_still_loads():
    from llmkit.training.config import TrainConfig

    chat_configs = sorted(data_path("models").glob("*/stages/*/[sd][fp][to]_config.json"))
    assert {p.parent.name for p in chat_configs} == {"sft_skills", "sft_polish", "dpo"}
    for path in chat_configs:
        assert ChatFinetuneConfig.from_json(path).max_steps > 0
    pretrain = TrainConfig.from_json(data_path("models", "base", "stages", "pretrain", "train_config.json"))
    assert pretrain.model["context_length"] == 1024 and pretrain.max_steps > 0


def test_resume_of_a_run_that_stopped_early_ends_where_an_uninterrupted_one_does(tiny_base, tmp_path):
    common = dict(base_model=str(tiny_base), kinds=["direct"], batch_size=2, max_steps=4, warmup_steps=1,
                  log_every=1, eval_every=4, checkpoint_every=2, heldout_examples=2, device="cpu", threads=1)
    whole = finetune_chat("sft", ChatFinetuneConfig(out_dir=str(tmp_path / "whole"), **common), progress=False)
    split_cfg = ChatFinetuneConfig(out_dir=str(tmp_path / "split"), **common)
    finetune_chat("sft", split_cfg, stop_after=2, progress=False)
    split = finetune_chat("sft", split_cfg, resume=True, progress=False)
    assert all(torch.equal(a, b) for a, b in zip(whole.state_dict().values(), split.state_dict().values()))


def test_length_groups_give_the_gradients_of_the_whole_padded_batch(tokenizer):
    from llmkit.training.distributed import Processes
    from llmkit.training.loop import accumulate_gradients
    from llmkit.training.sft import length_groups

    conversations = make_conversations(7, seed=3)
    lengths = sorted(len(c.render(tokenizer).ids) for c in conversations)
    assert lengths[0] < lengths[-1]  # the groups really are padded to different widths
    procs, cfg = Processes(torch.device("cpu")), FinetuneConfig()

    def gradients(batch):
        model = tiny_model(tokenizer.vocab_size)
        loss = accumulate_gradients(model, batch, lm_loss, cfg, procs)
        return loss, {name: p.grad.clone() for name, p in model.named_parameters()}

    whole_loss, whole = gradients(length_groups(conversations, tokenizer, 512, 1))
    groups = length_groups(conversations, tokenizer, 512, 3)
    assert len(groups) == 3 and sum(len(g.inputs) for g in groups) == 7
    assert [g.inputs.shape[1] for g in groups] == sorted(g.inputs.shape[1] for g in groups)
    assert sum(g.inputs.numel() for g in groups) < 7 * (lengths[-1] - 1)  # less padding computed
    grouped_loss, grouped = gradients(groups)
    assert torch.allclose(grouped_loss, whole_loss, atol=1e-5)
    for name in whole:
        assert torch.allclose(grouped[name], whole[name], atol=1e-5, rtol=1e-4), name


def test_more_length_groups_than_rows_is_refused():
    from llmkit.model.config import InvalidConfig

    with pytest.raises((ValueError, InvalidConfig), match="length_groups"):
        FinetuneConfig(batch_size=4, length_groups=5)
