"""Progress bars: plain tqdm in a terminal; in a notebook, the stored text copy is the final line."""
from __future__ import annotations

import nbformat
from nbclient import NotebookClient
from tqdm import tqdm as terminal_tqdm

from llmkit.progress import progress_bar

WIDGET = "application/vnd.jupyter.widget-view+json"


def test_outside_jupyter_it_is_plain_tqdm(capsys):
    bar = progress_bar(total=3, desc="steps")
    assert isinstance(bar, terminal_tqdm)
    for _ in range(3):
        bar.update(1)
    bar.close()
    assert "steps: 100%" in capsys.readouterr().err


def test_a_stored_notebook_keeps_the_bars_final_line(tmp_path):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(
        "from llmkit.progress import progress_bar\n"
        "bar = progress_bar(total=7, desc='training', unit='step')\n"
        "for _ in range(7):\n"
        "    bar.update(1)\n"
        "bar.set_postfix(loss='1.234')\n"
        "bar.close()")]
    NotebookClient(notebook, timeout=120, resources={"metadata": {"path": str(tmp_path)}}).execute()
    [output] = notebook.cells[0].outputs
    assert WIDGET in output["data"]  # the live widget is still there for Jupyter
    text = output["data"]["text/plain"]
    assert text.startswith("training: 100%") and "7/7" in text and "loss=1.234" in text, text
