"""`make lab` opens the course: JupyterLab starts and serves notebook 00; a bad Python is refused.

The test runs the real Makefile target against the virtual environment running the tests (which
`make test` has just set up, so the install stamps make the set-up step instant), headless.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def this_venv() -> list[str]:
    """`VENV=...` for make, so `make lab` uses the environment these tests run in."""
    return [f"VENV={sys.prefix}"] if sys.prefix != sys.base_prefix else []


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without the outer make's flags (the tests themselves run under `make test`)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return {**env, **extra}


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def test_make_lab_serves_notebook_00(tmp_path, free_port):
    port, token = free_port(), secrets.token_hex(16)
    lab_args = (f"--no-browser --port={port} --ip=127.0.0.1 --IdentityProvider.token={token} "
                "--LabApp.news_url=None --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate")
    env = clean_env(JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_DATA_DIR=str(tmp_path / "data"),
                    JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    log = tmp_path / "make-lab.log"
    with open(log, "wb") as out:
        # Its own process group, so the SIGTERM below reaches make and JupyterLab, nothing else.
        make = subprocess.Popen(["make", *this_venv(), "lab", f"LAB_ARGS={lab_args}"], cwd=REPO, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert make.poll() is None, f"make lab exited {make.returncode}:\n{log.read_text()[-4000:]}"
            try:
                status = get_json(f"{base}/status?token={token}")
                break
            except OSError:
                assert time.monotonic() < deadline, f"JupyterLab never answered:\n{log.read_text()[-4000:]}"
                time.sleep(0.5)
        assert "started" in status
        notebook = get_json(f"{base}/contents/notebooks/00_start_here.ipynb?content=0&token={token}")
        assert (notebook["type"], notebook["name"]) == ("notebook", "00_start_here.ipynb")
        # The page JupyterLab opens in the browser (it writes it even with --no-browser) is notebook 00.
        open_pages = list((tmp_path / "runtime").glob("jpserver-file-to-run-*-open.html"))
        assert len(open_pages) == 1 and "/lab/tree/notebooks/00_start_here.ipynb" in open_pages[0].read_text()
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGTERM)  # JupyterLab shuts down cleanly on SIGTERM
        try:
            make.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
            pytest.fail(f"make lab did not stop on SIGTERM:\n{log.read_text()[-4000:]}")
    with pytest.raises(OSError):  # the server is gone, not left running
        get_json(f"{base}/status?token={token}")


FAKE_OLD_PYTHON = """#!/bin/sh
# Stands in for an old interpreter: reports 3.8 and fails the Makefile's version test.
if [ "$1" = "--version" ]; then echo "Python 3.8.18"; exit 0; fi
exit 1
"""


@pytest.mark.parametrize("python, shown", [("old", "is Python 3.8.18"), ("missing", "was not found")])
def test_make_refuses_an_unsupported_python(tmp_path, python, shown):
    if python == "old":
        python = tmp_path / "python3.8"
        python.write_text(FAKE_OLD_PYTHON)
        python.chmod(0o755)
    else:
        python = tmp_path / "no-such-python"
    venv = tmp_path / "venv"
    result = subprocess.run(["make", f"PYTHON={python}", f"VENV={venv}", "lab"], cwd=REPO, env=clean_env(),
                            capture_output=True, text=True, timeout=60)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "llmkit needs Python 3.10 or newer" in output and shown in output
    assert "make PYTHON=python3.11 lab" in output  # says what to do
    assert not venv.exists()  # nothing was created with the wrong Python


def test_make_installs_pinned_torch_first(tmp_path):
    """torch goes in first, at pyproject's pin: an unpinned torch pulls a multi-GB CUDA build."""
    pin = re.search(r'"(torch==[^"]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    plan = subprocess.run(["make", "-n", f"VENV={tmp_path / 'venv'}", "lab"], cwd=REPO, env=clean_env(),
                          capture_output=True, text=True, check=True).stdout
    installs = [line for line in plan.splitlines() if " -m pip install" in line]
    assert installs[1].endswith(f"pip install --quiet {pin}"), installs
    assert installs[2].endswith("pip install --quiet -e ."), installs
