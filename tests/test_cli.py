import subprocess
import sys

from llmkit import cli


def test_usage_lists_every_command(capsys):
    assert cli.main([]) == 2  # no command is a usage error
    out = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert f"  {name}" in out


def test_unknown_command_says_what_exists(capsys):
    assert cli.main(["trian"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'trian'" in err and "train" in err


def test_every_command_resolves_to_a_function():
    import importlib

    for name, (module, _) in cli.COMMANDS.items():
        function = getattr(importlib.import_module(module), cli.ENTRY_POINTS.get(name, "main"))
        assert callable(function), name


def test_python_dash_m_llmkit_runs_a_subcommand():
    done = subprocess.run([sys.executable, "-m", "llmkit", "env", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "--quiet" in done.stdout
