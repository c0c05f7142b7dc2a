"""Notebook 07's pictures, tables and widgets, headless: replies stop where a harness stops, the
committed logs and results are read in the right order and summarised truthfully, DPO margins
agree with llmkit.training.finetune's loss, and each widget redraws when a control moves."""
from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from llmkit.chat.client import ContextWindowError  # noqa: E402
from llmkit.chat.template import render  # noqa: E402
from llmkit.course.conversations import KINDS, make_conversations  # noqa: E402
from llmkit.course.preferences import make_preferences  # noqa: E402
from llmkit.training.dpo import dpo_loss  # noqa: E402
from llmkit.model.transformer import ModelConfig  # noqa: E402
from llmkit.paths import data_path  # noqa: E402
from llmkit.viz import chat as chat_viz  # noqa: E402
from llmkit.viz import post_training as viz  # noqa: E402
from plot_checks import assert_titled_and_labelled  # noqa: E402
from scripted_model import ScriptedModel  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
HELLO = [{"role": "user", "content": "Hello!"}]


def scripted(tokenizer, text_ids: list[int], prompt_length: int, context_length: int = 64) -> ScriptedModel:
    torch.manual_seed(0)
    config = ModelConfig.llama(vocab_size=tokenizer.vocab_size, context_length=context_length, d_model=32,
                               n_layers=1, n_heads=4)
    return ScriptedModel(config, text_ids, prompt_length).eval()


# ---------------------------------------------------------------------------------------------- replies
def test_one_turn_stops_where_a_harness_stops(tokenizer):
    prompt_length = len(render(tokenizer, HELLO))
    end_turn, end_call = tokenizer.special_tokens["<|end_turn|>"], tokenizer.special_tokens["<|end_tool_call|>"]
    hi = tokenizer.encode("Hi there")
    answer = viz.one_turn(scripted(tokenizer, hi + [end_turn] + hi, prompt_length), tokenizer, HELLO, name="m")
    assert answer == viz.Reply("m", "Hi there<|end_turn|>", "end_turn", len(hi) + 1)
    call = viz.one_turn(scripted(tokenizer, hi + [end_call] + hi, prompt_length), tokenizer, HELLO)
    assert call.stop_reason == "tool_use" and call.text.endswith("<|end_tool_call|>")
    rambling = viz.one_turn(scripted(tokenizer, hi * 20, prompt_length), tokenizer, HELLO, max_new_tokens=5)
    assert rambling.stop_reason == "max_tokens" and rambling.output_tokens == 5


def test_one_turn_refuses_a_prompt_that_fills_the_context(tokenizer):
    model = scripted(tokenizer, [], 0, context_length=16)
    with pytest.raises(ContextWindowError, match="the context window is 16"):
        viz.one_turn(model, tokenizer, [{"role": "user", "content": "a long question " * 10}])


def test_model_comparer_shows_each_model_and_redraws(tokenizer):
    prompt_length = len(render(tokenizer, HELLO))
    end_turn = tokenizer.special_tokens["<|end_turn|>"]
    models = {"first": scripted(tokenizer, tokenizer.encode("Hi") + [end_turn], prompt_length),
              "second": scripted(tokenizer, tokenizer.encode("Yo") + [end_turn], prompt_length)}
    prompts = {"hello": {"messages": HELLO}, "long": {"messages": [{"role": "user", "content": "Tell me more."}]}}
    widget = viz.model_comparer(models, tokenizer, prompts)
    chooser, shown = widget.children
    assert "first" in shown.value and "second" in shown.value
    assert "Hi&lt;|end_turn|&gt;" in shown.value and "Yo&lt;|end_turn|&gt;" in shown.value and "end_turn" in shown.value
    first_view = shown.value
    chooser.value = "long"
    assert shown.value != first_view
    chooser.value = "hello"
    assert shown.value == first_view  # greedy: the same prompt shows the same replies
    with pytest.raises(ValueError, match="prompt must be one of"):
        viz.model_comparer(models, tokenizer, prompts, prompt="missing")


# ---------------------------------------------------------------------------------------------- logs
def write_log(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_stage_logs_come_in_stage_order(tmp_path):
    for model, stage, last in (("skills", "sft_skills", 10), ("chat", "sft_polish", 20), ("chat", "dpo", 30)):
        (tmp_path / model / "stages" / stage).mkdir(parents=True)
        write_log(tmp_path / model / "stages" / stage / "train_log.jsonl",
                  [{"kind": "eval", "step": 0, "heldout_loss": 5.0}, {"kind": "train", "step": last, "loss": 1.0}])
    stages = viz.stage_logs(models=tmp_path)
    assert [name for name, _ in stages] == ["sft_skills", "sft_polish"]  # the recipe's order, whichever model holds them
    assert [log[-1]["step"] for _, log in stages] == [10, 20]
    assert [log[-1]["step"] for _, log in viz.stage_logs(["dpo"], models=tmp_path)] == [30]
    fig = viz.plot_stage_logs(stages)
    assert_titled_and_labelled(fig, every_panel=True)
    starts = [line.get_xdata()[0] for line in fig.axes[0].lines if "training" in line.get_label()]
    assert starts == [10, 10 + 20]  # each stage's steps continue after the one before
    fig.canvas.draw()
    panel = fig.axes[0]
    assert panel.get_legend().get_window_extent().x0 >= panel.get_window_extent().x1  # beside the curves, not on them
    with pytest.raises(FileNotFoundError, match="make models"):
        viz.stage_logs(["nothing"], models=tmp_path)


def test_committed_logs_read_and_plot():
    stages = viz.stage_logs()
    assert [name for name, _ in stages] == ["sft_skills", "sft_polish"]
    assert all(any(r["kind"] == "train" for r in log) and any(r["kind"] == "eval" for r in log) for _, log in stages)
    dpo = viz.stage_logs(["dpo"])[0][1]
    assert_titled_and_labelled(viz.plot_dpo_log(dpo), every_panel=True)


def test_probe_rows_read_each_stages_last_probe():
    rows = viz.probe_rows()
    assert [row["stage"] for row in rows] == ["sft_polish", "dpo"]
    done = json.loads(data_path("models", "chat", "stages", "dpo", "done.json").read_text())
    assert rows[1]["right_tool"] == done["figures"]["probe"]["unseen_phrasings_and_tools"]["right_tool"]
    assert all(0.0 <= row[m] <= 1.0 for row in rows for m in viz.SKILL_METRICS)


# ---------------------------------------------------------------------------------------------- DPO
def test_pair_rewards_agree_with_the_dpo_loss(tokenizer, tiny_llama):
    pairs = make_preferences(3, split="heldout", seed=0)
    reference = tiny_llama(tokenizer.vocab_size, context_length=256)
    same = viz.pair_rewards(reference, reference, tokenizer, pairs, beta=0.1)
    assert [row["margin"] for row in same] == [0.0, 0.0, 0.0]  # policy = reference: no preference yet
    policy = tiny_llama(tokenizer.vocab_size, context_length=256)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    rows = viz.pair_rewards(policy, reference, tokenizer, pairs, beta=0.5)
    column = lambda key: torch.tensor([row[key] for row in rows])  # noqa: E731
    loss, accuracy = dpo_loss(column("policy_chosen"), column("policy_rejected"), column("reference_chosen"),
                              column("reference_rejected"), beta=0.5)
    margins = column("margin")
    assert -torch.nn.functional.logsigmoid(margins).mean().item() == pytest.approx(loss.item(), rel=1e-5)
    assert (margins > 0).float().mean().item() == pytest.approx(accuracy.item())
    assert margins.abs().min() > 0
    for row, pair in zip(rows, pairs):
        ids = pair.render(tokenizer)
        assert row["chosen"] == tokenizer.decode(ids["chosen"]) and row["rejected"] == tokenizer.decode(ids["rejected"])
        assert row["question"] == pair.prompt[-1]["content"] and row["kind"] == pair.kind
    with pytest.raises(ValueError, match="pairs is empty"):
        viz.pair_rewards(policy, reference, tokenizer, [])


# ---------------------------------------------------------------------------------------------- tables
def test_evals_rows_are_the_three_splits_in_order():
    rows = viz.evals_rows()
    committed = json.loads(data_path("models", "chat", "evals.json").read_text())
    assert [row["split"] for row in rows] == ["seen", "unseen_values", "unseen_phrasings_and_tools"]
    for row in rows:
        assert all(row[m] == committed[row["split"]][m] for m in viz.SKILL_METRICS)
    made_up = {split: {"right_tool": 0.5, "loss": 1.0} for split in viz.EVAL_SPLITS}
    assert viz.evals_rows(made_up, metrics=["right_tool"])[0] == {"split": "seen", "right_tool": 0.5}
    with pytest.raises(ValueError, match="unseen_values"):
        viz.evals_rows({"seen": {}})


def test_format_table_aligns_rounds_and_shortens_for_display_only():
    rows = [{"name": "a", "score": 0.12345, "text": "x" * 40}, {"name": "bbb", "score": 1.0, "text": "short"}]
    lines = viz.format_table(rows, ["name", "score", "text"], width=10).splitlines()
    assert len({len(line) for line in lines}) == 1  # every column padded to its widest cell
    assert lines[1].split() == ["----", "-----", "-" * 10]  # the widest cell of each column, header included
    assert "0.123" in lines[2] and "1.000" in lines[3] and "x" * 9 + "…" in lines[2]
    assert rows[0]["text"] == "x" * 40  # the data keep every character


# ---------------------------------------------------------------------------------------------- strawberry
def test_strawberry_rows_summaries_match_their_items():
    rows = viz.strawberry_rows()
    assert [r["format"] for r in rows] == sorted((r["format"] for r in rows),
                                                 key=["direct", "spelled", "tool", "spell"].index)
    for row in rows:
        recomputed = sum(item["correct"] for item in row["items"]) / len(row["items"])
        assert row["accuracy"] == pytest.approx(recomputed, abs=5e-4) and row["n"] == len(row["items"])
        assert viz.most_common_count_accuracy(row["items"]) == pytest.approx(row["guess_most_common_count"], abs=5e-4)
    assert viz.most_common_count_accuracy([{"count": 1}, {"count": 1}, {"count": 2}]) == pytest.approx(2 / 3)
    fig = viz.plot_strawberry(rows, baseline=0.5)
    assert_titled_and_labelled(fig, every_panel=True)
    bars = [patch.get_height() for patch in fig.axes[0].patches]
    assert sorted(bars) == sorted(r["accuracy"] for r in rows)


def test_strawberry_rows_need_results(tmp_path):
    with pytest.raises(FileNotFoundError, match="build_strawberry.py"):
        viz.strawberry_rows(tmp_path)


# ---------------------------------------------------------------------------------------------- template widget
def test_trained_texts_are_the_mask(tokenizer):
    kinds = ["weather", "letters", "arithmetic", "memory", "direct", "no_tool"]  # one trained run per message
    for conversation in make_conversations(12, split="train", seed=5, kinds=kinds):
        rendered = conversation.render(tokenizer)
        texts = chat_viz.trained_texts(tokenizer, rendered)
        assert len(texts) == sum(m["role"] == "assistant" for m in conversation.messages)
        assert "".join(texts) == tokenizer.decode(rendered.masked_ids())


def test_conversation_explorer_redraws_for_kind_and_example(tokenizer):
    widget = chat_viz.conversation_explorer(tokenizer, kind="memory", examples=3)
    (kinds, slider), picture = widget.children[0].children, widget.children[1]
    assert list(kinds.options) == list(KINDS) and slider.max == 2
    expected = make_conversations(3, kinds=["memory"])[0].render(tokenizer)
    assert picture.value == chat_viz.conversation_html(tokenizer, expected) + chat_viz.trained_texts_html(tokenizer, expected)
    seen = {picture.value}
    slider.value = 2
    assert picture.value not in seen
    seen.add(picture.value)
    kinds.value = "weather"
    assert picture.value not in seen and "get_weather" in picture.value
    with pytest.raises(ValueError, match="kind must be one of"):
        chat_viz.conversation_explorer(tokenizer, kind="poetry")


def test_strawberry_experiment_rows_take_each_scored_format(tmp_path):
    item = {"word": "kiwi", "letter": "i", "count": 2, "output": "kiwi has 2 i's.", "correct": True}
    results = {"settings": {"steps": 2500, "format_steps": 400},
               "heldout": {"spelling_alone": 0.5, "direct": 0.25, "spelled": None},
               "heldout_real_words": {"spelling_alone": 0.75, "direct": 0.5},
               "heldout_invented_words": {"spelling_alone": 0.25, "direct": 0.0},
               "mean_output_tokens": {"spelling_alone": 9.0, "direct": 6.5},
               "items": {"spell": [item], "direct": [item, item]}}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    rows = viz.strawberry_experiment_rows(path)
    assert [(r["format"], r["steps"], r["accuracy"]) for r in rows] == [("direct", 400, 0.25), ("spell", 2500, 0.5)]
    assert rows[0]["accuracy_real_words"] == 0.5 and len(rows[0]["items"]) == 2
    fig = viz.plot_strawberry(rows, baseline=0.4)
    assert [round(p.get_height(), 2) for p in fig.axes[0].patches] == [0.25, 0.5]
    results["settings"]["polish_steps"] = 1000  # a polished speller's steps count both schedules
    path.write_text(json.dumps(results))
    assert [r["steps"] for r in viz.strawberry_experiment_rows(path)] == [400, 3500]
    results["heldout"] = {"spelling_alone": None}
    path.write_text(json.dumps(results))
    with pytest.raises(ValueError, match="build.py"):
        viz.strawberry_experiment_rows(path)
