"""Every notebook with widgets works in a real browser: JupyterLab + headless Chromium.

For each notebook whose stored outputs hold a widget view, we open a copy saved without outputs,
Run All through the menu, and require: no "Error displaying widget" / "Model not found" /
"Traceback"; as many rendered widget views and images in each cell as the committed notebook
stores; every image decoded; and a live widget (typing in the first text box, else moving the
first slider, changes the output). The negative control disables the widget manager and shows
that this same check then fails.
"""
from __future__ import annotations

import pytest

from lab_driver import (NOTEBOOKS, WIDGET_MANAGER, Expected, WidgetCheckFailed, check_notebook, start_lab,
                        widget_notebooks)

pytestmark = pytest.mark.browser

WIDGET_NOTEBOOKS = widget_notebooks(NOTEBOOKS)


def test_notebook_00_has_widgets():
    """The widget path is exercised from notebook 00 on, so this list is never empty."""
    assert "00_start_here.ipynb" in [path.name for path in WIDGET_NOTEBOOKS]


@pytest.mark.parametrize("notebook", WIDGET_NOTEBOOKS, ids=[path.stem for path in WIDGET_NOTEBOOKS])
def test_widgets_render_and_respond(notebook, lab, browser):
    page = browser.new_page()
    try:
        check_notebook(page, lab, f"notebooks/{notebook.name}", Expected.from_notebook(notebook))
    finally:
        page.close()
        lab.shutdown_kernels()


def test_check_fails_without_widget_manager(browser, tmp_path):
    """Negative control: with @jupyter-widgets/jupyterlab-manager disabled the check must fail."""
    notebook = NOTEBOOKS / "00_start_here.ipynb"
    server = start_lab(tmp_path, disabled_extensions=(WIDGET_MANAGER,))
    page = browser.new_page()
    try:
        with pytest.raises(WidgetCheckFailed, match=r"rendered 0 of 1 widget views"):
            check_notebook(page, server, f"notebooks/{notebook.name}", Expected.from_notebook(notebook))
    finally:
        page.close()
        server.stop()
