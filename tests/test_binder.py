"""The Binder environment runs the course: an offline proxy for a real Binder build.

A real Binder build needs Docker and the internet. The proxy does what Binder does with
``binder/``, minus the container: a fresh virtual environment from ``binder/requirements.txt``
only, ``pip check``, ``binder/postBuild``, then a kernel from that environment, which must have
the JupyterLab widget manager enabled and must pass strict nbval on every notebook. The proxy
has to fail when ipywidgets is left out of the requirements, or it would prove nothing.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: pip vendors the same parser
    from pip._vendor import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
BINDER = REPO / "binder"
KERNEL_NAME = "binder-proxy"
WIDGET_MANAGER_ENABLED = re.compile(r"@jupyter-widgets/jupyterlab-manager v\S+ enabled\s+OK")
ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lines) -> dict[str, str]:
    """{package: version} from `name==version` requirement lines (comments and options skipped)."""
    found = {}
    for line in lines:
        line = line.split("#")[0].split(";")[0].strip()
        if line and not line.startswith("-"):
            name, sep, version = line.partition("==")
            assert sep, f"not pinned exactly: {line!r}"
            found[canonical(name)] = version.strip()
    return found


def proxy_requirements(text: str, leave_out: tuple[str, ...] = ()) -> str:
    """binder/requirements.txt as the offline proxy installs it: option lines (PyTorch's CPU index,
    unreachable here) dropped, and local labels such as `+cpu` removed, so `torch==2.13.0+cpu`
    becomes the `torch==2.13.0` that `make lab` installs."""
    kept = []
    for line in text.splitlines():
        if line.strip().startswith("--"):
            continue
        name = re.split(r"[=<>!~;\s]", line.strip(), maxsplit=1)[0]
        if name and canonical(name) in leave_out:
            continue
        kept.append(re.sub(r"(==[^\s+;#]+)\+[\w.]+", r"\1", line))
    return "\n".join(kept) + "\n"


# ---------------------------------------------------------------- building the proxy

@dataclass
class ProxyBuild:
    """A Binder-like environment built from binder/ alone, with a log of every step."""

    home: Path
    steps: dict[str, subprocess.CompletedProcess] = field(default_factory=dict)

    @property
    def venv(self) -> Path:
        return self.home / "venv"

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("JUPYTER", "PYTHON", "VIRTUAL_ENV", "CONDA"))}
        env.update(PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(self.venv),
                   PYTHONNOUSERSITE="1", JUPYTER_CONFIG_DIR=str(self.home / "config"),
                   JUPYTER_DATA_DIR=str(self.home / "data"), JUPYTER_RUNTIME_DIR=str(self.home / "runtime"),
                   JUPYTER_PATH=str(self.home / "kernels" / "share" / "jupyter"))
        return env

    def run(self, step: str, *command: str, timeout: float = 600) -> subprocess.CompletedProcess:
        result = subprocess.run(command, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout)
        self.steps[step] = result
        return result

    def build(self, leave_out: tuple[str, ...] = ()) -> "ProxyBuild":
        requirements = self.home / "requirements.txt"
        requirements.write_text(proxy_requirements((BINDER / "requirements.txt").read_text(), leave_out))
        subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True, env=self.env)
        python = str(self.venv / "bin" / "python")
        if self.run("pip install", python, "-m", "pip", "install", "--quiet", "-r", str(requirements)).returncode:
            return self
        self.run("pip check", python, "-m", "pip", "check")
        self.run("postBuild", str(BINDER / "postBuild"))
        self.run("kernel", python, "-m", "ipykernel", "install", "--prefix", str(self.home / "kernels"),
                 "--name", KERNEL_NAME, "--display-name", "Binder proxy")
        self.run("labextension list", python, "-m", "jupyter", "labextension", "list")
        return self

    def problems(self) -> list[str]:
        """Every way this environment falls short of running the course (empty: it is fine)."""
        found = [f"{step} exited {result.returncode}:\n{(result.stdout + result.stderr)[-3000:]}"
                 for step, result in self.steps.items() if result.returncode]
        listing = self.steps.get("labextension list")
        shown = ANSI_COLOUR.sub("", listing.stdout + listing.stderr) if listing else "(not run)"
        if not WIDGET_MANAGER_ENABLED.search(shown):
            found.append(f"the JupyterLab widget manager is not enabled; `jupyter labextension list`:\n{shown[-2000:]}")
        return found

    def remove(self) -> None:
        shutil.rmtree(self.venv, ignore_errors=True)  # ~1.5 GB each: don't leave them in /tmp


@pytest.fixture(scope="session")
def binder_proxy(tmp_path_factory):
    """The proxy built from binder/ as committed, once per test session."""
    build = ProxyBuild(tmp_path_factory.mktemp("binder-proxy")).build()
    yield build
    build.remove()


# ---------------------------------------------------------------- binder/ itself (fast)

def pyproject_dependencies() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return pins(project["dependencies"])


def test_binder_requirements_pin_the_course_environment():
    """Same packages at the same versions as pyproject.toml (torch's `+cpu` build is torch 2.13.0)."""
    binder = pins((BINDER / "requirements.txt").read_text().splitlines())
    public = {name: version.split("+")[0] for name, version in binder.items()}
    assert public == pyproject_dependencies()


def test_binder_gets_cpu_torch():
    """On Binder an exact `torch==X` resolves to the multi-GB CUDA build; we pin the CPU wheel."""
    text = (BINDER / "requirements.txt").read_text()
    assert re.search(r"^--extra-index-url https://download\.pytorch\.org/whl/cpu\s*$", text, re.M)
    assert re.search(r"^torch==[\d.]+\+cpu\s*$", text, re.M)
    assert "torch==2.13.0\n" in proxy_requirements(text)
    assert not re.search(r"^\s*--", proxy_requirements(text), re.M)


def test_binder_runtime_and_postbuild():
    runtime = (BINDER / "runtime.txt").read_text().strip()
    match = re.fullmatch(r"python-3\.(\d+)", runtime)
    assert match and int(match.group(1)) >= 10, f"runtime.txt should name Python 3.10+, not {runtime!r}"
    postbuild = BINDER / "postBuild"
    assert os.access(postbuild, os.X_OK), "binder/postBuild must be executable (git update-index --chmod=+x)"
    assert re.search(r"pip install --no-deps -e \.", postbuild.read_text())


# ---------------------------------------------------------------- the proxy (slow: builds venvs)

@pytest.mark.binder
@pytest.mark.slow
def test_binder_proxy_environment(binder_proxy):
    """requirements install, pip check is clean, postBuild (and its self-check) passes, widgets on."""
    assert binder_proxy.problems() == []


@pytest.mark.binder
@pytest.mark.slow
def test_binder_proxy_runs_every_notebook(binder_proxy):
    """Strict nbval on every notebook, through a kernel from the proxy environment only."""
    assert "pip install" in binder_proxy.steps and not binder_proxy.problems(), binder_proxy.problems()
    env = binder_proxy.env
    del env["VIRTUAL_ENV"]
    env["PATH"] = env["PATH"].split(os.pathsep, 1)[1]  # pytest and nbval come from the test venv
    specs = subprocess.run([sys.executable, "-m", "jupyter", "kernelspec", "list", "--json"],
                           env=env, capture_output=True, text=True, check=True)
    argv = json.loads(specs.stdout)["kernelspecs"][KERNEL_NAME]["spec"]["argv"]
    assert Path(argv[0]).parent == binder_proxy.venv / "bin", argv  # the kernel is the proxy's Python

    notebooks = sorted(str(path.relative_to(REPO)) for path in (REPO / "notebooks").glob("*.ipynb"))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *notebooks, "--nbval", "--nbval-kernel-name", KERNEL_NAME,
         "--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "-p", "no:cacheprovider", "-q"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert re.search(r"\d+ passed", result.stdout)


@pytest.mark.binder
@pytest.mark.slow
def test_binder_proxy_fails_without_ipywidgets(tmp_path):
    """Negative control: the same proxy check fails when ipywidgets is left out of binder/."""
    build = ProxyBuild(tmp_path)
    try:
        build.build(leave_out=("ipywidgets",))
        assert "pip install" in build.steps and build.steps["pip install"].returncode == 0
        problems = "\n".join(build.problems())
    finally:
        build.remove()
    assert "the JupyterLab widget manager is not enabled" in problems
    assert "postBuild exited 1" in problems and "ipywidgets" in problems  # llmkit.env names it
