"""Drive a real JupyterLab in headless Chromium: start a server, Run All, inspect the page.

Used by test_widgets.py. Recipe: shared recipes, section 4 (JupyterLab 4.6, ipywidgets 8).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
WIDGET_MANAGER = "@jupyter-widgets/jupyterlab-manager"
ERROR_TEXTS = ("Error displaying widget", "Model not found", "Traceback")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def find_chromium() -> str | None:
    """Debian's chromium binary (the CHROMIUM variable overrides); None if it is not there."""
    for name in ([os.environ["CHROMIUM"]] if os.environ.get("CHROMIUM") else ["chromium", "chromium-browser"]):
        if shutil.which(name):
            return shutil.which(name)
    return None


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@dataclass
class LabServer:
    """A JupyterLab server on loopback with its own config, data and runtime folders."""

    root: Path
    home: Path
    disabled_extensions: tuple[str, ...] = ()
    port: int = field(default_factory=free_port)
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90) -> "LabServer":
        config = self.home / "config"
        settings = config / "lab" / "user-settings" / "@jupyterlab"
        # No news or update toasts, and every cell kept in the page (no windowing) so we can read it.
        write_json(settings / "apputils-extension" / "notification.jupyterlab-settings",
                   {"fetchNews": "false", "checkForUpdates": False})
        write_json(settings / "notebook-extension" / "tracker.jupyterlab-settings", {"windowingMode": "none"})
        write_json(config / "labconfig" / "page_config.json",
                   {"disabledExtensions": {name: True for name in self.disabled_extensions}})
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("JUPYTER", "JPY_")) or k == "JUPYTER_PLATFORM_DIRS"}
        env.update(JUPYTER_CONFIG_DIR=str(config), JUPYTER_DATA_DIR=str(self.home / "data"),
                   JUPYTER_RUNTIME_DIR=str(self.home / "runtime"))
        self.log = open(self.home / "server.log", "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={self.port}", "--ip=127.0.0.1",
             "--allow-root", f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
             "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.root)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.process.returncode}:\n{self.log_text()}")
            try:
                self.api("status")
                return self
            except OSError:
                time.sleep(0.3)
        raise TimeoutError(f"JupyterLab did not answer in {timeout} s:\n{self.log_text()}")

    def log_text(self) -> str:
        return (self.home / "server.log").read_text(errors="replace")[-4000:]

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(f"{self.url}/api/{path}?token={self.token}", method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        for session in self.api("sessions"):
            self.api(f"sessions/{session['id']}", method="DELETE")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # jupyter_server shuts its kernels down on SIGTERM
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


# ---------------------------------------------------------------- notebooks

def widget_notebooks(folder: Path) -> list[Path]:
    """Every notebook whose stored outputs contain a widget view: those are the ones to open."""
    return [path for path in sorted(folder.glob("*.ipynb")) if WIDGET_MIME in path.read_text(encoding="utf-8")]


def copy_without_outputs(source: Path, target: Path) -> None:
    """Save ``source`` with every output, execution count and saved widget state removed."""
    import nbformat

    notebook = nbformat.read(source, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    notebook.metadata.pop("widgets", None)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)


def lab_root(tmp_path: Path) -> Path:
    """A folder like the repository, with the widget notebooks saved *without* their outputs."""
    root = tmp_path / "root"
    for notebook in widget_notebooks(NOTEBOOKS):
        copy_without_outputs(notebook, root / "notebooks" / notebook.name)
    (root / "data").symlink_to(REPO / "data", target_is_directory=True)  # as in the repository
    return root


def start_lab(tmp_path: Path, disabled_extensions: tuple[str, ...] = ()) -> LabServer:
    return LabServer(lab_root(tmp_path), tmp_path, disabled_extensions).start()


@dataclass
class Expected:
    """What the stored (committed) notebook says each non-empty code cell shows at top level."""

    cells: list[dict]  # one per code cell in page order: {"run": bool, "widgets": int, "images": int}

    @classmethod
    def from_notebook(cls, path: Path) -> "Expected":
        import nbformat

        notebook = nbformat.read(path, as_version=4)
        cells = []
        for cell in notebook.cells:
            if cell.cell_type != "code":
                continue
            data = [output.get("data", {}) for output in cell.outputs]
            cells.append({"run": bool(cell.source.strip()),
                          "widgets": sum(WIDGET_MIME in d for d in data),
                          "images": sum("image/png" in d or "image/jpeg" in d for d in data)})
        return cls(cells)


# ---------------------------------------------------------------- the page

# Per code cell: its prompt, the widget views and images its output area shows at top level (not
# inside another widget), the size of every image in it, and the text of its output area.
READ_CELLS_JS = """
() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')].map(cell => {
  const area = cell.querySelector('.jp-Cell-outputArea');
  const children = area ? [...area.children].filter(c => c.classList.contains('jp-OutputArea-child')) : [];
  const outputs = children.map(c => c.querySelector(':scope > .jp-OutputArea-output')).filter(o => o);
  return {
    prompt: (cell.querySelector('.jp-InputArea-prompt') || {}).textContent || '',
    widgets: outputs.filter(o => o.querySelector(':scope > .jupyter-widgets')).length,
    images: outputs.filter(o => o.classList.contains('jp-RenderedImage')).length,
    imageSizes: area ? [...area.querySelectorAll('img')].map(i => i.complete ? i.naturalWidth : -1) : [],
    text: area ? area.innerText : '',
  };
})
"""

CONTROLS = ".widget-slider, .widget-text, .widget-textarea, .widget-dropdown, .widget-checkbox, .widget-toggle-buttons"
# What a cell's output shows, minus the controls themselves: text, plus a hash of every image.
OUTPUT_SIGNATURE_JS = """
(cell) => {
  const area = cell.querySelector('.jp-Cell-outputArea');
  const clone = area.cloneNode(true);
  clone.querySelectorAll('%s').forEach(e => e.remove());
  const hash = s => { let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0; return h; };
  return clone.textContent + ' | images: ' + [...area.querySelectorAll('img')].map(i => hash(i.src)).join(',');
}
""" % CONTROLS

TEXT_BOX = ".widget-textarea textarea, .widget-text input[type='text']"
SLIDER_HANDLE = ".widget-slider .noUi-handle"


class WidgetCheckFailed(AssertionError):
    pass


def wait_until(condition, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise WidgetCheckFailed(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def open_and_run_all(page, server: LabServer, relpath: str, expected: Expected, timeout: float) -> None:
    """Open the notebook, wait for its kernel, then Run → Run All Cells through the menu bar."""
    workspace = secrets.token_hex(4)  # a fresh workspace: no tabs restored from an earlier test
    page.goto(f"{server.url}/lab/workspaces/{workspace}/tree/{relpath}?reset&token={server.token}")
    statusbar = page.locator("#jp-main-statusbar")
    # The notebook toolbar says "idle" before any kernel exists; the status bar names the kernel.
    statusbar.get_by_text("| Idle").wait_for(timeout=90_000)
    page.locator(".jp-Notebook .jp-Cell").first.click()
    page.locator(".lm-MenuBar-item", has_text="Run").first.click()
    page.locator(".lm-Menu-item", has_text="Run All Cells").first.click()

    def finished():
        cells = page.evaluate(READ_CELLS_JS)
        text = "\n".join(cell["text"] for cell in cells)
        if "Traceback" in text:  # a cell raised: Run All stops there, so don't wait for the rest
            raise WidgetCheckFailed(f"{relpath}: a cell raised during Run All:\n{text[-3000:]}")
        ran = all(cell["prompt"].strip()[1:-2].isdigit()
                  for cell, want in zip(cells, expected.cells) if want["run"])
        return ran and "| Idle" in statusbar.inner_text()

    # Each executed cell's prompt reads [n]:, and the kernel is idle again.
    time.sleep(0.5)
    wait_until(finished, timeout, f"{relpath} to finish Run All")


def check_page(page, relpath: str, expected: Expected) -> list[str]:
    """Every problem the page shows: error texts, widget views or images not rendered."""
    problems = []
    cells = wait_until(lambda: _settled(page), 15, "images to load")
    if len(cells) != len(expected.cells):
        return [f"{relpath}: page shows {len(cells)} code cells, the notebook has {len(expected.cells)}"]
    for number, (cell, want) in enumerate(zip(cells, expected.cells), start=1):
        where = f"{relpath}, code cell {number}"
        if want["run"] and not cell["prompt"].strip()[1:-2].isdigit():
            problems.append(f"{where} did not run (prompt {cell['prompt']!r})")
        for text in ERROR_TEXTS:
            if text in cell["text"]:
                problems.append(f"{where} shows {text!r}:\n{cell['text'][-2000:]}")
        if cell["widgets"] != want["widgets"]:
            problems.append(f"{where}: rendered {cell['widgets']} of {want['widgets']} widget views "
                            f"(the page shows instead: {cell['text'][:300]!r})")
        if cell["images"] != want["images"]:
            problems.append(f"{where}: shows {cell['images']} images, the stored notebook has {want['images']}")
        if any(width <= 0 for width in cell["imageSizes"]):
            problems.append(f"{where}: an image did not decode (naturalWidth {cell['imageSizes']})")
    return problems


def _settled(page):
    cells = page.evaluate(READ_CELLS_JS)
    return cells if all(width != -1 for cell in cells for width in cell["imageSizes"]) else None


def check_interaction(page, relpath: str) -> list[str]:
    """Type in the first text box (else nudge the first slider) and see the output change."""
    code_cells = page.locator(".jp-Notebook .jp-CodeCell")
    for index in range(code_cells.count()):
        cell = code_cells.nth(index)
        box, handle = cell.locator(TEXT_BOX), cell.locator(SLIDER_HANDLE)
        if box.count():
            control, what = box.first, "typing in the text box"
        elif handle.count():
            control, what = handle.first, "moving the slider"
        else:
            continue
        where = f"{relpath}, code cell {index + 1}"
        before = cell.evaluate(OUTPUT_SIGNATURE_JS)
        if box.count():
            control.fill(control.input_value() + " Tokens: 🙂 नमस्ते 12345")
            control.evaluate("e => e.blur()")  # also syncs boxes that update only on change
        else:
            readout = cell.locator(".widget-slider .widget-readout").first
            value_before = readout.inner_text() if readout.count() else None
            control.focus()
            control.press("ArrowRight")
            if readout.count():
                try:
                    wait_until(lambda: readout.inner_text() != value_before, 5, "the slider readout")
                except WidgetCheckFailed:
                    return [f"{where}: ArrowRight on the slider did not change its readout ({value_before})"]
        try:
            wait_until(lambda: cell.evaluate(OUTPUT_SIGNATURE_JS) != before, 20, "the output")
        except WidgetCheckFailed:
            return [f"{where}: {what} did not change the output:\n{before[:500]}"]
        return []
    return []  # no text box or slider: rendering is all there is to check


def check_notebook(page, server: LabServer, relpath: str, expected: Expected, timeout: float = 300) -> None:
    """Run All in the browser, then require rendered widgets, decoded images and a live widget."""
    open_and_run_all(page, server, relpath, expected, timeout)
    problems = check_page(page, relpath, expected)
    if not problems:
        problems = check_interaction(page, relpath)
    if problems:
        raise WidgetCheckFailed("\n".join(problems))
