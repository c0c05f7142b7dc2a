"""data/experiments/open_chain/: open talk in the skills stage, a polish that keeps it, DPO-Positive."""
import json

from experiment_script import EXPERIMENTS, MAIN_RECIPE, recipe_chain

FOLDER = EXPERIMENTS / "open_chain"


def test_the_skills_stage_is_the_open_talk_runs():
    names, _, chain = recipe_chain(FOLDER / "recipe.json")
    done = json.loads((EXPERIMENTS / "open_talk" / "sft_skills" / "done.json").read_text())
    assert chain[names.index("sft_skills")] == done["chain"]
    _, _, main_chain = recipe_chain(MAIN_RECIPE)
    assert chain[:names.index("sft_skills")] == main_chain[:names.index("sft_skills")]


def test_the_polish_goes_on_gently_on_the_skills_stage_data():
    names, stages, _ = recipe_chain(FOLDER / "recipe.json")
    skills, polish = (stages[names.index(n)]["settings"] for n in ("sft_skills", "sft_polish"))
    assert polish["learning_rate"] == skills["min_learning_rate"] and polish["warmup_steps"] == 0
    assert all(polish[k] for k in ("open_framing", "open_enums", "open_talk"))
    assert {k: v for k, v in polish["mix"].items() if k in skills["mix"]} == skills["mix"]
    assert set(polish["mix"]) - set(skills["mix"]) == {"own_tool_open"}


def test_dpo_and_evals_are_the_main_recipes():
    names, stages, _ = recipe_chain(FOLDER / "recipe.json")
    main_names, main, _ = recipe_chain(MAIN_RECIPE)
    assert names == main_names
    for stage in ("dpo", "evals"):
        assert stages[names.index(stage)]["settings"] == main[names.index(stage)]["settings"]


def test_the_committed_logs_are_this_runs():
    names, _, chain = recipe_chain(FOLDER / "recipe.json")
    for stage in ("sft_skills", "sft_polish", "dpo", "evals"):
        done = json.loads((FOLDER / stage / "done.json").read_text())
        assert done["chain"] == chain[names.index(stage)]
    for stage, last in (("sft_skills", 1200), ("sft_polish", 1000)):
        log = [json.loads(line) for line in (FOLDER / stage / "train_log.jsonl").read_text().splitlines()]
        steps = [row["step"] for row in log if row["kind"] == "train"]
        assert steps == sorted(set(steps)) and steps[-1] == last  # the skills stage resumed once, no step twice
    report = json.loads((FOLDER / "evals" / "evals.json").read_text())
    assert set(report) == {"seen", "unseen_values", "unseen_phrasings_and_tools"}
