"""The package layering AGENTS.md states, held by a test rather than by review."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "platform" / "toolsift"


def importers(package: str) -> list[str]:
    """The lines of `toolsift` that import `package`, as `path:line`."""
    imports = re.compile(rf"^\s*(from|import)\s+{package}\b")
    return [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if imports.match(line)
    ]


def test_toolsift_never_imports_workers() -> None:
    # `workers` imports `toolsift`; the other way round would tie the API to the tasks.
    assert importers("workers") == []


def test_toolsift_never_imports_the_tooling() -> None:
    # The benchmarks and the evaluation plug into the CLI by entry point; an import would
    # make the product need a distribution its image does not install.
    assert importers("toolsift_tooling") == []
