"""Every notebook is committed executed, so strict nbval has something to compare.

A notebook saved without outputs passes `pytest --nbval` vacuously: there is nothing to compare.
So each notebook in notebooks/ must have been run top to bottom in a fresh kernel (execution
counts 1, 2, 3, ... on every non-empty code cell), must store outputs, and must store no errors.
Re-run one with:
    .venv/bin/jupyter nbconvert --to notebook --execute --inplace --NotebookClient.record_timing=False notebooks/NAME.ipynb
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_the_course_has_notebooks():
    assert "00_start_here.ipynb" in [path.name for path in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_notebook_is_committed_executed(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    code = [cell for cell in notebook["cells"]
            if cell["cell_type"] == "code" and "".join(cell["source"]).strip()]
    assert code, f"{path.name} has no code cells"

    unexecuted = [i for i, cell in enumerate(code, start=1) if cell.get("execution_count") is None]
    assert not unexecuted, f"{path.name}: code cells {unexecuted} were never run; execute it (see module doc)"

    counts = [cell["execution_count"] for cell in code]
    assert counts == list(range(1, len(code) + 1)), (
        f"{path.name}: execution counts {counts} are not 1..{len(code)}: run it top to bottom in a fresh kernel")

    errors = [(i, output.get("ename")) for i, cell in enumerate(code, start=1)
              for output in cell.get("outputs", []) if output["output_type"] == "error"]
    assert not errors, f"{path.name}: stored error outputs in code cells {errors}"

    assert any(cell.get("outputs") for cell in code), f"{path.name} stores no outputs at all"
