"""Load a script under data/experiments/ as a module, so tests can call its functions."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXPERIMENTS = Path(__file__).resolve().parent.parent / "data" / "experiments"


def load_experiment(name: str, script: str) -> ModuleType:
    """``data/experiments/<name>/<script>`` as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"{name}_{Path(script).stem}", EXPERIMENTS / name / script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
