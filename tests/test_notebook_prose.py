"""A figure in a notebook's prose is one that the notebook's code prints or writes.

The course's rule: a number in a markdown cell comes from a code cell. When a model is retrained
and the notebooks re-run, a figure typed into the prose goes stale while the outputs move; this
test finds it. A prose figure passes when some code cell of the same notebook prints it or holds
it in its source, to the prose figure's own precision ("0.66" matches a printed 0.661, "6,471"
a printed 6470.9). Single digits and notebook numbers such as "07" are not checked.

``CONTEXT`` lists the few figures the prose quotes from outside its code (history, other models,
a figure restated in other units), each with the reason; nothing else is exempt.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
NUMBER = re.compile(r"(?<![\w.])\d[\d,_]*(?:\.\d+)?")
LINK_TARGET = re.compile(r"\]\([^)]*\)")

CONTEXT = {
    ("07_post_training", "2024"): "the year of the DPO-Positive paper (Pal et al. 2024) the prose cites",
    ("00_start_here", "10"): "the map's notebook numbers",
    ("00_start_here", "11"): "the map's notebook numbers",
    ("00_start_here", "12"): "the map's notebook numbers",
    ("00_start_here", "1234567890"): "a number the learner is invited to type into the widget",
    ("01_tokens", "255"): "the largest value a byte holds",
    ("01_tokens", "50257"): "GPT-2's vocabulary size, for comparison",
    ("01_tokens", "128"): "Llama 3's vocabulary size (128k), for comparison",
    ("02_embeddings", "318"): "the 320 printed dimensions less the 2 a map keeps",
    ("02_embeddings", "106"): "an example pair of positions",
    ("02_embeddings", "107"): "an example pair of positions",
    ("02_embeddings", "100"): "a value the learner is invited to try",
    ("04_next_token", "90"): "top_p=0.9 in the code, said as a share",
    ("05_generation_loop", "6.5"): "the printed 6,471 TFLOPs in words (quadrillion operations)",
    ("06_pretraining", "1613"): "the year Henry VIII was first staged",
    ("07_post_training", "8.7"): "the printed 8,749,120 parameters in millions",
    ("09_tools_and_agents", "2022"): "the year the ReAct paper appeared",
    ("11_limitations", "1.1"): "the fact_frequency experiment's model size, from its README",
}


def numbers(text: str) -> set[str]:
    """The figures written in ``text``, without thousands separators ("8,749,120" -> "8749120")."""
    return {found.replace(",", "").replace("_", "") for found in NUMBER.findall(text)}


def code_text(cell: dict) -> str:
    """A code cell's source and every text form of its outputs."""
    parts = ["".join(cell["source"])]
    for output in cell.get("outputs", []):
        parts.append("".join(output.get("text", "")))
        for kind in ("text/plain", "text/html", "text/markdown"):
            parts.append("".join(output.get("data", {}).get(kind, "")))
    return "\n".join(parts)


def checked(figure: str) -> bool:
    digits = figure.replace(".", "")
    return len(digits) > 1 and not (figure.startswith("0") and "." not in figure)


def shown_to_precision(figure: str, shown: list[float]) -> bool:
    places = len(figure.split(".")[1]) if "." in figure else 0
    return any(round(value, places) == float(figure) for value in shown)


def unbacked_figures(notebook: dict) -> list[tuple[int, str]]:
    """(markdown cell index, figure) for each prose figure no code cell prints or holds."""
    shown = [float(n) for cell in notebook["cells"] if cell["cell_type"] == "code" for n in numbers(code_text(cell))]
    return [(i, figure) for i, cell in enumerate(notebook["cells"]) if cell["cell_type"] == "markdown"
            for figure in sorted(numbers(LINK_TARGET.sub("]", "".join(cell["source"]))))
            if checked(figure) and not shown_to_precision(figure, shown)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_every_figure_in_the_prose_is_printed_by_the_notebook(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    unbacked = [(i, figure) for i, figure in unbacked_figures(notebook) if (path.stem, figure) not in CONTEXT]
    assert not unbacked, (f"{path.name}: figures in markdown cells that no code cell prints: {unbacked}; "
                          "print them from the result, or list one quoted from outside in CONTEXT with its reason")


def test_every_context_exemption_is_still_needed():
    needed = {(path.stem, figure) for path in NOTEBOOKS
              for _, figure in unbacked_figures(json.loads(path.read_text(encoding="utf-8")))}
    assert set(CONTEXT) <= needed, f"exemptions no notebook needs any more: {sorted(set(CONTEXT) - needed)}"


def test_a_typed_figure_that_the_outputs_do_not_hold_is_caught():
    notebook = {"cells": [
        {"cell_type": "code", "source": ["print(score)"], "outputs": [{"output_type": "stream", "text": ["0.661\n"]}]},
        {"cell_type": "markdown", "source": ["The score is 0.66, up from 0.52, over 1,200 steps."]}]}
    assert unbacked_figures(notebook) == [(1, "0.52"), (1, "1200")]
