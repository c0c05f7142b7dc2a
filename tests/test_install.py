"""Installed anywhere, llmkit still finds its models: a wheel built from the checkout carries them.

The test builds a wheel, installs it into a fresh virtual environment in a temporary folder (with
this environment's site-packages appended for torch and the other dependencies, but not the
checkout), and there loads both shipped models and generates with each.
"""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = r"""
import json, sys
from pathlib import Path
import llmkit
from llmkit.generation.generate import generate
from llmkit.paths import DATA_DIR
results = {"file": llmkit.__file__, "data_dir": str(DATA_DIR), "sys_path": sys.path, "models": {}}
for name in ("base", "chat"):
    model, tokenizer = llmkit.load_model(name)
    out = generate(model, tokenizer.encode("ROMEO.\n"), max_new_tokens=5, tokenizer=tokenizer, seed=0)
    results["models"][name] = {"params": sum(p.numel() for p in model.parameters()), "tokens": out.tokens}
print(json.dumps(results))
"""


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


def source_copy(folder: Path) -> Path:
    """What a build reads, copied: building in the checkout would reuse (possibly stale) build/ files."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy2(ROOT / name, folder / name)
    shutil.copytree(ROOT / "llmkit", folder / "llmkit", ignore=ignore)
    for shipped in ("models/base", "models/chat", "docs"):
        shutil.copytree(ROOT / "data" / shipped, folder / "data" / shipped)
    return folder


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source, out = source_copy(tmp_path_factory.mktemp("source")), tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)])
    (built,) = out.glob("llmkit-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_carries_the_shipped_models(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for model in ("base", "chat"):
        for file in ("config.json", "model.safetensors", "tokenizer.json"):
            assert f"llmkit/data/models/{model}/{file}" in names
    shipped = (ROOT / "data" / "models" / "chat" / "model.safetensors").read_bytes()
    assert zipfile.ZipFile(wheel).read("llmkit/data/models/chat/model.safetensors") == shipped
    assert not any(name.startswith("llmkit/data/corpus") for name in names)  # only what the package needs
    assert "llmkit/course/tool_vocabulary.txt" in names  # the words generated tools are named with


@pytest.mark.slow
def test_an_installed_wheel_loads_both_models_and_generates(wheel, tmp_path):
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    # the dependencies (torch, ...) come from this environment's site-packages, appended after the
    # new environment's own; a path in a .pth file is added without running that folder's .pth
    # files, so this environment's editable install of the checkout stays inactive there
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)])

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LLMKIT_DATA", "PYTHONHOME")}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "base").mkdir()  # a stray folder named like a shipped model must not shadow it
    found = json.loads(run([str(python), "-c", PROBE], cwd=elsewhere, env=env).stdout)

    assert Path(found["file"]).resolve().is_relative_to(site.resolve())
    assert not any(entry and Path(entry).resolve() == ROOT for entry in found["sys_path"])
    assert Path(found["data_dir"]).resolve().is_relative_to(site.resolve())
    for name in ("base", "chat"):
        assert found["models"][name]["params"] > 1_000_000
        assert len(found["models"][name]["tokens"]) >= 1


def test_llmkit_data_overrides_where_the_data_is(tmp_path):
    """LLMKIT_DATA wins over both the checkout's data/ and a packaged copy."""
    env = {**os.environ, "LLMKIT_DATA": str(tmp_path), "PYTHONPATH": str(ROOT)}
    probe = "from llmkit.paths import DATA_DIR, data_path; print(DATA_DIR); data_path('models')"
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == str(tmp_path)
    assert "LLMKIT_DATA" in result.stderr and "models is missing" in result.stderr  # names the override
    env.pop("LLMKIT_DATA")
    result = subprocess.run([sys.executable, "-c", "from llmkit.paths import DATA_DIR; print(DATA_DIR)"], env=env,
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert Path(result.stdout.strip()) == ROOT / "data"  # from a checkout: the checkout's data/
