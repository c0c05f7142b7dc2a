"""llmkit.training.train: the loss, the schedule, the loop, checkpoints and resume, two processes = one."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from llmkit.paths import data_path
from llmkit.training.checkpoint import read_log
from llmkit.training.config import TrainConfig
from llmkit.training.loop import learning_rate, lm_loss, make_optimizer
from llmkit.training.train import main, train
from llmkit.model.transformer import ModelConfig, Transformer

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = data_path("models", "base", "tokenizer.json")
TINY_MODEL = {"family": "llama", "context_length": 16, "d_model": 32, "n_layers": 2, "n_heads": 2, "dropout": 0.0}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    """A small slice of the course corpus: enough text to train a tiny model for a few steps."""
    folder = tmp_path_factory.mktemp("corpus")
    heldout = data_path("corpus", "heldout.txt").read_text(encoding="utf-8")
    (folder / "train.txt").write_text(heldout[:12_000], encoding="utf-8")
    (folder / "heldout.txt").write_text(heldout[20_000:23_000], encoding="utf-8")
    return {"train_corpus": folder / "train.txt", "heldout_corpus": folder / "heldout.txt"}


def tiny_config(corpus, out_dir, **changes) -> TrainConfig:
    values = dict(model=dict(TINY_MODEL), tokenizer=str(TOKENIZER), out_dir=str(out_dir), seed=3,
                  batch_size=4, max_steps=6, learning_rate=3e-3, min_learning_rate=3e-4, warmup_steps=2,
                  log_every=1, eval_every=3, checkpoint_every=3, sample_tokens=8, device="cpu",
                  **{k: str(v) for k, v in corpus.items()})
    values.update(changes)
    return TrainConfig.from_dict(values)


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(model_dir / "model.safetensors")


def train_losses(out_dir: Path) -> list[float]:
    return [r["loss"] for r in read_log(out_dir / "train_log.jsonl") if r["kind"] == "train"]


# ------------------------------------------------------------------------------------------ pieces
def test_loss_is_the_mean_over_masked_positions():
    torch.manual_seed(0)
    logits, targets = torch.randn(2, 5, 11), torch.randint(0, 11, (2, 5))
    plain = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    assert torch.allclose(lm_loss(logits, targets), plain)
    assert torch.allclose(lm_loss(logits, targets, torch.ones(2, 5, dtype=torch.bool)), plain)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[0, 3:] = True
    per_position = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(2, 5)
    assert torch.allclose(lm_loss(logits, targets, mask), per_position[0, 3:].mean())


def test_all_masked_batch_gives_zero_loss_not_nan():
    logits = torch.randn(3, 4, 7, requires_grad=True)
    loss = lm_loss(logits, torch.zeros(3, 4, dtype=torch.long), torch.zeros(3, 4, dtype=torch.bool))
    loss.backward()
    assert loss.item() == 0.0
    assert torch.isfinite(logits.grad).all() and not logits.grad.any()


def test_learning_rate_warms_up_then_follows_a_cosine():
    cfg = TrainConfig(model=TINY_MODEL, learning_rate=1e-3, min_learning_rate=1e-4, warmup_steps=10, max_steps=110)
    rates = [learning_rate(step, cfg) for step in range(cfg.max_steps + 1)]
    assert all(a < b for a, b in zip(rates[:10], rates[1:10]))  # rising during warm-up
    assert rates[9] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(rates[10:], rates[11:]))  # then never rising
    assert rates[60] == pytest.approx(0.55e-3)  # half-way down the cosine: the midpoint
    assert rates[-1] == pytest.approx(1e-4)


def test_weight_decay_applies_to_matrices_only():
    model = Transformer(ModelConfig.llama(vocab_size=64, **{k: v for k, v in TINY_MODEL.items() if k != "family"}))
    optimizer = make_optimizer(model, TrainConfig(model=TINY_MODEL, weight_decay=0.1))
    decayed, plain = optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decayed["params"]) and all(p.dim() == 1 for p in plain["params"])
    assert len(decayed["params"]) + len(plain["params"]) == len(list(model.parameters()))


# ---------------------------------------------------------------------------------- clear errors
def test_unknown_config_key_is_named():
    with pytest.raises(ValueError, match=r"'learning_rat'.*did you mean 'learning_rate'"):
        TrainConfig.from_dict({"model": TINY_MODEL, "learning_rat": 1e-3})
    with pytest.raises(ValueError, match=r"'n_layer'.*model section"):
        TrainConfig.from_dict({"model": {**TINY_MODEL, "n_layer": 2}})
    with pytest.raises(ValueError, match=r"lacks the key\(s\) \['model'\]"):
        TrainConfig.from_dict({"learning_rate": 1e-3})
    with pytest.raises(ValueError, match="dtype"):
        TrainConfig.from_dict({"model": TINY_MODEL, "dtype": "float16"})


def test_cli_names_a_bad_key_in_the_config_file(tmp_path):
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"model": TINY_MODEL, "max_step": 3}))
    with pytest.raises(ValueError, match=r"'max_step'.*bad\.json"):
        main(["--config", str(config)])


def test_missing_corpus_names_the_path(corpus, tmp_path):
    cfg = tiny_config(corpus, tmp_path / "run", train_corpus=str(tmp_path / "no_such_corpus.txt"))
    with pytest.raises(FileNotFoundError, match="no_such_corpus.txt"):
        train(cfg, progress=False)


# ------------------------------------------------------------------------------------ the loop
@pytest.mark.slow
def test_same_seed_same_run(corpus, tmp_path):
    for name in ("a", "b"):
        train(tiny_config(corpus, tmp_path / name, model={**TINY_MODEL, "dropout": 0.1}), progress=False)
    assert train_losses(tmp_path / "a") == train_losses(tmp_path / "b")
    first, second = weights(tmp_path / "a" / "model"), weights(tmp_path / "b" / "model")
    assert all(torch.equal(first[name], second[name]) for name in first)


@pytest.mark.slow
def test_loss_goes_down_on_a_tiny_run(corpus, tmp_path):
    small = tmp_path / "small.txt"  # ~500 tokens: 40 steps see it ten times over, enough to memorise
    small.write_text(corpus["train_corpus"].read_text(encoding="utf-8")[:1500], encoding="utf-8")
    cfg = tiny_config(corpus, tmp_path, train_corpus=str(small), max_steps=40, batch_size=8, eval_every=40,
                      checkpoint_every=40, log_every=5, learning_rate=1e-2, min_learning_rate=1e-3)
    train(cfg, progress=False)
    losses = train_losses(tmp_path)
    evals = [r for r in read_log(tmp_path / "train_log.jsonl") if r["kind"] == "eval"]
    assert losses[0] > math.log(2048) - 1.5  # starts near chance: ln(vocab) nats
    assert losses[-1] < losses[0] - 2.5
    assert evals[-1]["heldout_loss"] < evals[0]["heldout_loss"] - 0.2  # a little carries over to unseen text
    # bits per byte = nats per token / ln 2 * tokens per byte, for every evaluation
    assert all(r["heldout_bpb"] < r["heldout_loss"] / math.log(2) for r in evals)
    samples = [r for r in read_log(tmp_path / "train_log.jsonl") if r["kind"] == "sample"]
    assert [s["step"] for s in samples] == [0, 40] and all(s["text"].startswith(cfg.sample_prompt) for s in samples)


def test_resume_gives_the_same_result_as_an_uninterrupted_run(corpus, tmp_path):
    changes = dict(model={**TINY_MODEL, "dropout": 0.1})  # dropout: the RNG state must be restored too
    train(tiny_config(corpus, tmp_path / "whole", **changes), progress=False)
    train(tiny_config(corpus, tmp_path / "split", **changes), stop_after=3, progress=False)
    assert not (tmp_path / "split" / "model").exists()  # stopped early: only the checkpoint
    train(tiny_config(corpus, tmp_path / "split", **changes), resume=True, progress=False)

    whole, split = weights(tmp_path / "whole" / "model"), weights(tmp_path / "split" / "model")
    assert all(torch.equal(whole[name], split[name]) for name in whole)
    assert train_losses(tmp_path / "whole") == train_losses(tmp_path / "split")
    steps = [(r["kind"], r["step"]) for r in read_log(tmp_path / "split" / "train_log.jsonl")]
    assert steps == [(r["kind"], r["step"]) for r in read_log(tmp_path / "whole" / "train_log.jsonl")]


def test_checkpoint_is_safetensors_and_json_only(corpus, tmp_path):
    train(tiny_config(corpus, tmp_path, max_steps=3), progress=False)
    files = sorted(p.name for p in (tmp_path / "checkpoint").iterdir())
    assert files == ["config.json", "model.safetensors", "optimizer.safetensors", "trainer_state.json"]
    state = json.loads((tmp_path / "checkpoint" / "trainer_state.json").read_text())
    assert state["step"] == 3
    tensors = load_file(tmp_path / "checkpoint" / "optimizer.safetensors")
    assert "rng.cpu.rank0" in tensors and any(k.endswith(".exp_avg_sq") for k in tensors)


def test_bfloat16_autocast_trains(corpus, tmp_path):
    train(tiny_config(corpus, tmp_path, dtype="bfloat16", max_steps=3), progress=False)
    assert all(math.isfinite(loss) for loss in train_losses(tmp_path))


# --------------------------------------------------------------------------------- two processes
@pytest.mark.slow
def test_two_processes_match_one_with_the_same_global_batch(corpus, tmp_path):
    config = tmp_path / "ddp.json"
    values = tiny_config(corpus, tmp_path / "two", max_steps=4, eval_every=100, checkpoint_every=100).to_dict()
    config.write_text(json.dumps(values))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "-m", "llmkit", "train", "--config", str(config)]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]

    train(TrainConfig.from_dict({**values, "out_dir": str(tmp_path / "one")}), progress=False)
    one, two = weights(tmp_path / "one" / "model"), weights(tmp_path / "two" / "model")
    assert one.keys() == two.keys()
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=0, atol=1e-6)
    assert train_losses(tmp_path / "two") == pytest.approx(train_losses(tmp_path / "one"), abs=1e-4)


# ------------------------------------------------------------------------------ every field checked
def test_every_bad_field_is_named_in_one_message():
    bad = {"model": TINY_MODEL, "learning_rate": math.nan, "min_learning_rate": -1.0, "grad_clip": -1.0,
           "weight_decay": -0.1, "max_steps": 0, "log_every": 0, "eval_every": 0, "checkpoint_every": 0,
           "betas": [0.9, 1.5], "warmup_steps": -1, "device": "tpu:x", "threads": 0}
    with pytest.raises(ValueError) as caught:
        TrainConfig.from_dict(bad, source="bad.json")
    message = str(caught.value)
    for field in bad:
        if field != "model":
            assert field in message, field
    assert "bad.json" in message


@pytest.mark.parametrize("field, value", [("learning_rate", 1e6), ("learning_rate", math.inf),
                                          ("learning_rate", 0.0), ("seed", -1), ("batch_size", 0)])
def test_values_that_cannot_train_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig.from_dict({"model": TINY_MODEL, field: value})


@pytest.mark.parametrize("field, value", [("batch_size", "8"), ("max_steps", 2.5), ("learning_rate", "1e-3"),
                                          ("max_steps", True), ("model", [1, 2])])
def test_wrong_types_are_type_errors(field, value):
    with pytest.raises(TypeError, match=field):
        TrainConfig.from_dict({"model": TINY_MODEL, field: value})


def test_finetune_config_checks_its_own_fields():
    from llmkit.training.config import FinetuneConfig

    with pytest.raises(ValueError) as caught:
        FinetuneConfig(beta=-0.1, sft_weight=math.nan, dropout=1.0)
    assert all(part in str(caught.value) for part in ("beta must be greater than 0", "sft_weight", "dropout"))
    assert "model" not in {f for f in FinetuneConfig().to_dict()}  # the shape comes from base_model


# ------------------------------------------------------------------------------------ bits per byte
def test_bits_per_byte_of_a_string_equals_that_of_its_tokens():
    from llmkit.model.weights import load_model
    from llmkit.training.data import TokenizedText
    from llmkit.training.train import bits_per_byte

    model, tokenizer = load_model("base")
    text = "KING.\nWhat say you, my lord? Speak, and be brief."
    tokens = TokenizedText(None, __import__("numpy").array(tokenizer.encode(text)), len(text.encode("utf-8")))
    from_string, from_tokens = bits_per_byte(model, tokenizer, text), bits_per_byte(model, None, tokens)
    assert from_string == from_tokens
    assert from_string["tokens"] == len(tokens) - 1
    assert from_string["bpb"] == pytest.approx(from_string["loss"] * from_string["tokens"] / math.log(2) / tokens.n_bytes)
    assert bits_per_byte(model, tokenizer, "USER.\nMy phone battery died.")["bpb"] > from_string["bpb"]
    with pytest.raises(ValueError, match="at least two tokens"):
        bits_per_byte(model, tokenizer, "a")
    with pytest.raises(TypeError, match="tokenizer"):
        bits_per_byte(model, None, text)


# --------------------------------------------------------------------------------- copy rows
class _Copier(torch.nn.Module):
    """A stand-in model that predicts the token ``span - 1`` places back: a perfect copier of spans said twice."""

    def __init__(self, span: int, vocab_size: int = 50):
        super().__init__()
        self.span, self.weight = span, torch.nn.Parameter(torch.zeros(1))
        self.config = ModelConfig(vocab_size=vocab_size, context_length=128, d_model=8, n_layers=1, n_heads=1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        back = torch.roll(ids, self.span - 1, dims=1)
        return F.one_hot(back, self.config.vocab_size).float() + self.weight


def test_copy_accuracy_is_one_for_a_copier_and_near_zero_for_a_fresh_model():
    from llmkit.training.train import copy_accuracy

    assert copy_accuracy(_Copier(24), span=24) == 1.0
    assert copy_accuracy(_Copier(20), span=24) < 0.1  # copying from the wrong place is not copying
    fresh = Transformer(ModelConfig(vocab_size=64, context_length=128, d_model=32, n_layers=2, n_heads=2))
    assert copy_accuracy(fresh) < 0.2


class _OneIdInduction(torch.nn.Module):
    """A stand-in for a single-id induction head: predicts what followed the last earlier copy of the current id."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.config = ModelConfig(vocab_size=vocab_size, context_length=128, d_model=8, n_layers=1, n_heads=1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        predicted = torch.zeros_like(ids)
        for b, row in enumerate(ids.tolist()):
            seen: dict[int, int] = {}
            for i, token in enumerate(row):
                predicted[b, i] = row[seen[token] + 1] if token in seen else 0
                seen[token] = i
        return F.one_hot(predicted, self.config.vocab_size).float() + self.weight


def test_copying_words_needs_more_than_single_id_induction():
    from llmkit.tokens.tokenizer import Tokenizer
    from llmkit.training.train import copy_words_by_place

    tokenizer = Tokenizer.load(TOKENIZER)
    assert copy_words_by_place(_Copier(24, tokenizer.vocab_size), tokenizer) == {
        "word_start": 1.0, "space": 1.0, "inside_word": 1.0}
    induction = copy_words_by_place(_OneIdInduction(tokenizer.vocab_size), tokenizer)
    assert induction["inside_word"] > 0.95 and induction["space"] > 0.95 and induction["word_start"] < 0.2


def test_copy_rows_join_each_batch_and_the_run_still_resumes_exactly(corpus, tmp_path):
    changes = dict(copy_rows=2, max_steps=4, eval_every=2, checkpoint_every=2)
    train(tiny_config(corpus, tmp_path / "whole", **changes), progress=False)
    train(tiny_config(corpus, tmp_path / "split", **changes), stop_after=2, progress=False)
    train(tiny_config(corpus, tmp_path / "split", **changes), resume=True, progress=False)
    whole, split = weights(tmp_path / "whole" / "model"), weights(tmp_path / "split" / "model")
    assert all(torch.equal(whole[name], split[name]) for name in whole)
    evals = [r for r in read_log(tmp_path / "whole" / "train_log.jsonl") if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [0, 2, 4] and all(0.0 <= r["copy_accuracy"] <= 1.0 for r in evals)
    train(tiny_config(corpus, tmp_path / "plain", max_steps=4, eval_every=2, checkpoint_every=2), progress=False)
    plain = weights(tmp_path / "plain" / "model")
    assert any(not torch.equal(plain[name], whole[name]) for name in plain)  # the copy rows changed the training


def test_short_copy_rows_train_and_resume_exactly(corpus, tmp_path):
    changes = dict(copy_rows=2, copy_row_length=4, max_steps=4, eval_every=2, checkpoint_every=2)
    train(tiny_config(corpus, tmp_path / "whole", **changes), progress=False)
    train(tiny_config(corpus, tmp_path / "split", **changes), stop_after=2, progress=False)
    train(tiny_config(corpus, tmp_path / "split", **changes), resume=True, progress=False)
    whole, split = weights(tmp_path / "whole" / "model"), weights(tmp_path / "split" / "model")
    assert all(torch.equal(whole[name], split[name]) for name in whole)
    train(tiny_config(corpus, tmp_path / "long", **{**changes, "copy_row_length": None}), progress=False)
    long = weights(tmp_path / "long" / "model")
    assert any(not torch.equal(long[name], whole[name]) for name in long)  # other rows, other training
    with pytest.raises(ValueError, match="copy_row_length"):
        tiny_config(corpus, tmp_path / "bad", copy_rows=2, copy_row_length=5)  # 5 does not divide 16


def test_copy_word_share_changes_the_copy_rows_and_logs_copying_across_spaces(corpus, tmp_path):
    changes = dict(copy_rows=2, max_steps=2, eval_every=2, checkpoint_every=2)
    train(tiny_config(corpus, tmp_path / "tokens", **changes), progress=False)
    train(tiny_config(corpus, tmp_path / "words", copy_word_share=1.0, **changes), progress=False)
    tokens, words = weights(tmp_path / "tokens" / "model"), weights(tmp_path / "words" / "model")
    assert any(not torch.equal(tokens[name], words[name]) for name in tokens)
    evals = [r for r in read_log(tmp_path / "words" / "train_log.jsonl") if r["kind"] == "eval"]
    assert all(0.0 <= r["copy_words_accuracy"] <= 1.0 for r in evals)
    with pytest.raises(ValueError, match="copy_word_share"):
        tiny_config(corpus, tmp_path / "bad", copy_rows=2, copy_word_share=1.5)


def test_copy_rows_cannot_exceed_the_batch():
    with pytest.raises(ValueError, match="copy_rows"):
        TrainConfig(model=TINY_MODEL, batch_size=4, copy_rows=5)


def test_a_run_grown_from_a_shallow_copy_practice_run_starts_where_it_ended(corpus, tmp_path):
    shallow = dict(TINY_MODEL, n_layers=1)
    practice = tiny_config(corpus, tmp_path / "practice", model=shallow, copy_rows=4, max_steps=3, sample_tokens=0)
    train(practice, progress=False)  # every row a copy row: no corpus text at all
    assert [r["step"] for r in read_log(tmp_path / "practice" / "train_log.jsonl") if r["kind"] == "sample"] == []
    changes = dict(grow_from=str(tmp_path / "practice" / "model"), max_steps=4, eval_every=2, checkpoint_every=2)
    train(tiny_config(corpus, tmp_path / "whole", **changes), progress=False)
    last_practice = [r for r in read_log(tmp_path / "practice" / "train_log.jsonl") if r["kind"] == "eval"][-1]
    first_grown = [r for r in read_log(tmp_path / "whole" / "train_log.jsonl") if r["kind"] == "eval"][0]
    assert first_grown["step"] == 0
    assert first_grown["heldout_loss"] == pytest.approx(last_practice["heldout_loss"], abs=1e-4)
    grown = weights(tmp_path / "whole" / "model")
    assert {name.split(".")[1] for name in grown if name.startswith("blocks.")} == {"0", "1"}
    # resuming a grown run continues its checkpoint; it does not grow the practice model again
    train(tiny_config(corpus, tmp_path / "split", **changes), stop_after=2, progress=False)
    train(tiny_config(corpus, tmp_path / "split", **changes), resume=True, progress=False)
    split = weights(tmp_path / "split" / "model")
    assert all(torch.equal(grown[name], split[name]) for name in grown)


def test_growing_from_an_incompatible_model_names_the_difference(corpus, tmp_path):
    practice = tiny_config(corpus, tmp_path / "practice", model=dict(TINY_MODEL, n_layers=1, d_model=48),
                           copy_rows=4, max_steps=1, sample_tokens=0)
    train(practice, progress=False)
    with pytest.raises(ValueError, match="d_model"):
        train(tiny_config(corpus, tmp_path / "grown", grow_from=str(tmp_path / "practice" / "model")), progress=False)
