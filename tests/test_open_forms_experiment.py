"""data/experiments/open_forms/: open_talk's skills stage with open forms, its run and results are the recipe's."""
import json
import re
from collections import Counter

from experiment_script import EXPERIMENTS, assert_stage_run_is_the_recipes, load_experiment

FOLDER = EXPERIMENTS / "open_forms"


def test_the_recipe_is_open_talks_skills_stage_with_only_open_forms_added():
    from llmkit.course.recipe_stages import chain_hashes, load_recipe

    recipe, before = load_recipe(FOLDER / "recipe.json"), load_recipe(EXPERIMENTS / "open_talk" / "recipe.json")
    assert [s["name"] for s in recipe["stages"]] == [s["name"] for s in before["stages"]]
    assert chain_hashes(recipe["stages"])[:-1] == chain_hashes(before["stages"])[:-1]
    settings, theirs = recipe["stages"][-1]["settings"], before["stages"][-1]["settings"]
    assert {k: v for k, v in settings.items() if theirs.get(k) != v} == {"open_forms": True}
    assert set(theirs) <= set(settings)


def test_the_committed_run_is_the_recipe_here():
    assert_stage_run_is_the_recipes(FOLDER)


def test_the_committed_results_are_measured_as_open_talks_were():
    results = json.loads((FOLDER / "results.json").read_text())
    before = json.loads((EXPERIMENTS / "open_talk" / "results.json").read_text())
    assert set(results["models"]) == {"open_forms"}
    for key in ("per_kind", "argument_conversations"):
        assert results[key] == before[key]
    ours, theirs = results["models"]["open_forms"], before["models"]["open_talk"]
    for split, scores in theirs["evals"].items():
        for kind, kind_scores in scores["kinds"].items():  # the same conversations, so the same counts
            assert ours["evals"][split]["kinds"][kind]["n_right_tool"] == kind_scores["n_right_tool"]
    for split, copy in theirs["argument_copy"].items():
        assert ours["argument_copy"][split]["n"] == copy["n"]



def test_the_first_tokens_sort_every_value_the_copy_score_counted():
    results = json.loads((FOLDER / "results.json").read_text())
    first = json.loads((FOLDER / "first_token.json").read_text())
    assert first["n"] == results["argument_conversations"] and set(first["models"]) == {"open_forms"}
    for split, counts in first["models"]["open_forms"].items():
        copy = results["models"]["open_forms"]["argument_copy"][split]
        assert sum(counts.values()) == copy["n"]
        assert counts["right"] == round(copy["first_token"] * copy["n"])


def test_the_form_word_counts_are_the_scripts_on_the_shipped_shakespeare_and_cover_every_form_word():
    from llmkit.paths import data_path

    script = load_experiment("open_forms", "form_words.py")
    shakespeare = json.loads((FOLDER / "form_words.json").read_text())
    assert shakespeare == json.loads(json.dumps(script.measure(data_path("corpus", "train.txt").read_text("utf-8"))))
    recipe = json.loads((FOLDER / "form_words_recipe.json").read_text())
    for part in ("held_out_only", "training"):
        assert set(recipe[part]["counts"]) == set(shakespeare[part]["counts"])
        # the recipe's corpus is the Shakespeare text and more, so no word is counted fewer times there
        assert all(recipe[part]["counts"][w] >= n for w, n in shakespeare[part]["counts"].items())
    assert not set(shakespeare["held_out_only"]["counts"]) & set(shakespeare["training"]["counts"])


def test_the_outcomes_by_form_count_the_same_conversations_as_open_talks():
    ours = json.loads((FOLDER / "calls_by_form.json").read_text())
    theirs = json.loads((EXPERIMENTS / "open_talk" / "calls_by_form.json").read_text())
    assert (ours["per_kind"], ours["kinds"]) == (theirs["per_kind"], theirs["kinds"])
    split = "unseen_phrasings_and_tools"
    for kind, forms in theirs["by_form"]["open_talk"][split].items():
        mine = ours["by_form"]["open_forms"][split][kind]
        assert {f: sum(o.values()) for f, o in mine.items()} == {f: sum(o.values()) for f, o in forms.items()}
        assert sum(ours["models"]["open_forms"][split][kind].values()) == ours["per_kind"]


def test_each_pair_changes_only_rare_words_into_words_the_base_read_and_no_training_phrasing_uses():
    from llmkit.course.open_framing import heldout_words
    from llmkit.course.phrasing_pools import HELDOUT, TRAIN
    from llmkit.paths import data_path

    script = load_experiment("open_forms", "known_words.py")
    recipe_counts = json.loads((FOLDER / "form_words_recipe.json").read_text())["held_out_only"]["counts"]
    shakespeare = Counter(re.findall(r"[a-z']+", data_path("corpus", "train.txt").read_text("utf-8").lower()))
    training_words = heldout_words(TRAIN)  # every word of every training phrasing piece
    for kind, pairs in script.PAIRS.items():
        for form, known in pairs.items():
            assert form in HELDOUT.forms[kind] and script.SLOT.findall(form) == script.SLOT.findall(known)
            old, new = (Counter(re.findall(r"[a-z']+", script.SLOT.sub(" ", f.lower()))) for f in (form, known))
            gone, added = old - new, new - old
            assert gone and added
            rare = [w for w in gone if w not in training_words]  # "up" of "dig up" goes too
            assert rare and all(recipe_counts[w] <= 10 for w in rare)  # the base read them ten times or fewer
            assert all(shakespeare[w] >= 30 and w not in training_words for w in added)


def test_a_reworded_request_keeps_its_values_and_casing_and_the_results_count_both_versions():
    script = load_experiment("open_forms", "known_words.py")
    form, known = "Tally up the {letter}'s within {word}.", "Cast up the {letter}'s within {word}."
    assert script.reworded("Hi! be a dear: tally up the r's within Strawberry. Thanks", form, known) == \
        "Hi! be a dear: cast up the r's within Strawberry. Thanks"
    assert script.reworded("TALLY UP THE r'S WITHIN Kiwi.", form, known) == "CAST UP THE r'S WITHIN Kiwi."
    assert script.reworded("How many r's in kiwi?", form, known) is None
    result = json.loads((FOLDER / "known_words.json").read_text())
    entries = [e for forms in result["by_form"].values() for e in forms.values()]
    assert sum(e["n"] for e in entries) == result["n"]
    for version in ("as_written", "known_words"):
        assert result["totals"][version]["exact"] == sum(e[version]["exact"] for e in entries)
        assert all(e[version]["exact"] <= e[version]["valid"] <= e["n"] for e in entries)  # an exact call is valid
