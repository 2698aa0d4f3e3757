"""Every migration holds its own texts: none loads another, reads a file or imports the app.

A migration that took its SQL from another revision (or from the application) changed when
that one did, after it had run somewhere; `benchmarks/migration_dumps.py` showed the frozen
copies leave every step's schema as before."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

VERSIONS = Path(__file__).resolve().parents[1] / "migrations" / "versions"
# Ways to reach code or text outside the file.
MODULES = ("importlib", "runpy", "toolsift", "migrations", "pathlib")
CALLS = {"spec_from_file_location", "exec_module", "import_module", "__import__", "exec"}
CALLS |= {"open", "read_text", "read_bytes", "load_python_file"}


def reaches_outside(source: str) -> list[str]:
    """What in `source` loads code or text from elsewhere, as `line: what`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or "."] if node.level == 0 else ["." * node.level]
        for name in names:
            if name.startswith(".") or name.split(".")[0] in MODULES:
                found.append(f"{node.lineno}: imports {name}")
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in CALLS:
                found.append(f"{node.lineno}: calls {called}")
    return found


@pytest.mark.parametrize("path", sorted(VERSIONS.glob("*.py")), ids=lambda p: p.name[:15])
def test_a_migration_reaches_nothing_outside_itself(path: Path) -> None:
    assert reaches_outside(path.read_text()) == []


def test_the_check_finds_each_way_out() -> None:
    source = (
        "from importlib.util import spec_from_file_location\n"
        "import toolsift.selection\n"
        "from . import sibling\n"
        "text = Path(__file__).with_name('x.py').read_text()\n"
        "spec.loader.exec_module(module)\n"
        "handle = open('x.sql')\n"
    )
    assert reaches_outside(source) == [
        "1: imports importlib.util",
        "2: imports toolsift.selection",
        "3: imports .",
        "4: calls read_text",
        "5: calls exec_module",
        "6: calls open",
    ]
