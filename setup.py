"""Packs the shipped models (and the documents the course's search tool reads) into the wheel.

The checkout's ``data/`` folder stays the one source of truth; a build copies the files listed in
``SHIPPED`` into the package as ``llmkit/data/...``, where ``llmkit.paths`` finds them when the
package is installed away from the checkout. Everything else is in pyproject.toml.
"""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = ("models/base", "models/chat", "docs")  # folders under data/, copied whole (no subfolders)


def shipped_files() -> list[Path]:
    files = []
    for folder in SHIPPED:
        source = ROOT / "data" / folder
        if not source.is_dir():
            raise FileNotFoundError(f"data/{folder} is missing; build the wheel from a full checkout")
        files += sorted(p for p in source.iterdir() if p.is_file())
    return files


class BuildWithData(build_py):
    """``build_py`` plus the shipped data files, placed inside the built package."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's data/ directly
            return
        for source in shipped_files():
            target = Path(self.build_lib) / "llmkit" / "data" / source.relative_to(ROOT / "data")
            self.mkpath(str(target.parent))
            self.copy_file(str(source), str(target))


setup(cmdclass={"build_py": BuildWithData})
