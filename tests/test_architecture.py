"""The package's shape: each subpackage imports only from its own floor or below (../shared/design.md).

Imports inside functions count too: a circle hidden in a function is still a circle, and it is
what makes a reader (or Python, at the wrong moment) go round in loops.
"""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "llmkit"

# Lowest first. Modules at the same floor may import each other; nothing imports upwards.
FLOORS = {
    "paths": 0, "checks": 0, "devices": 0, "files": 0, "progress": 0,
    "tokens": 1,
    "model": 2,
    "generation": 3,
    "training": 4, "chat": 4,
    "serve": 5,
    "course": 6,
    "viz": 7, "cli": 7, "env": 7, "__main__": 7,
}


def room(module: str) -> str:
    """``llmkit.chat.tools`` -> ``chat``; ``llmkit`` itself (the package's front door) -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def llmkit_imports(path: Path) -> set[str]:
    """Every llmkit module ``path`` imports, at the top or inside a function."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("llmkit")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("llmkit") and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}  # `from llmkit.x import y` may be a module
    return found


SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_lives_in_a_known_room():
    unknown = sorted({room(module_name(p)) for p in SOURCES} - set(FLOORS) - {"__init__"})
    assert not unknown, f"add {unknown} to FLOORS in this test and to the map in DEVELOPERS.md"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_the_pipeline(path):
    here = room(module_name(path))
    if here == "__init__":
        return  # llmkit/__init__.py is the front door: it may name any entry point
    upward = sorted(name for name in llmkit_imports(path)
                    if room(name) in FLOORS and FLOORS[room(name)] > FLOORS[here])
    assert not upward, f"{path.relative_to(PACKAGE)} (floor {FLOORS[here]}) imports from higher floors: {upward}"


def test_the_checker_sees_imports_inside_functions(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from llmkit.course import evals\n    import llmkit.viz.chat\n")
    assert {"llmkit.course", "llmkit.course.evals", "llmkit.viz.chat"} <= llmkit_imports(sample)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_one_idea_per_file(path):
    # ~400 lines is the guideline (../shared/design.md); past 450 a file holds two ideas: split it along them
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= 450, f"{path.relative_to(PACKAGE)} has {lines} lines: split it along its ideas"
