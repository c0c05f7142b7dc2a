"""Progress bars that read well everywhere: a terminal, a live notebook, and a notebook stored on disk.

``tqdm.auto`` draws a widget in Jupyter. A stored notebook keeps two copies of that output: the
widget (shown only where widgets run) and a plain-text line for everywhere else (GitHub, nbviewer,
a diff). Plain tqdm writes that text line once, when the bar appears, so a stored notebook said
``0/150 [00:00<?]`` forever. ``progress_bar`` shows the widget under a display id and, when the bar
closes, updates that display, so the text line becomes the bar's final state:
``training: 100%|##########| 150/150 [01:16<00:00, 1.97step/s, loss=5.912]``.
"""
from __future__ import annotations

import functools

from tqdm.auto import tqdm
from tqdm.notebook import tqdm as notebook_tqdm


def progress_bar(**options) -> tqdm:
    """A ``tqdm`` bar (same options: total, desc, unit, disable, ...) whose stored text in a notebook
    is its final line rather than its first. Outside Jupyter it is plain ``tqdm``."""
    if issubclass(tqdm, notebook_tqdm) and not options.get("disable"):  # tqdm.auto chose the widget
        return _final_line_bar()(**options)
    return tqdm(**options)


@functools.cache
def _final_line_bar() -> type:
    """The notebook bar class, made on first use (it needs IPython and ipywidgets, present in Jupyter)."""
    from IPython.display import display

    class FinalLineBar(tqdm):
        """tqdm's notebook widget, displayed under a display id and re-sent once it has closed."""

        def __init__(self, **options):
            super().__init__(**options, display=False)
            self.handle = display(self.container, display_id=True)
            self.displayed = True

        def close(self) -> None:
            super().close()
            if self.handle is not None:
                self.handle.update(self.container)  # the text copy becomes the final line
                self.handle = None

    return FinalLineBar
