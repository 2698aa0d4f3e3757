"""The package layering AGENTS.md states, held by a test rather than by review."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "platform" / "toolsift"


def test_toolsift_never_imports_workers() -> None:
    # `workers` imports `toolsift`; the other way round would tie the API to the tasks.
    imports = re.compile(r"^\s*(from|import)\s+workers\b")
    offenders = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if imports.match(line)
    ]
    assert offenders == []
