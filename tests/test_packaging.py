"""What the product's wheel carries: the files the image installs, and no benchmark code.

Built from the same files the Dockerfile copies, so a source the app reads at run time (the
SQL objects, the tokenizer, the dashboard) cannot be left out of the image unnoticed, and the
tooling (`tooling/`, its own distribution) cannot creep back in.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# docker/Dockerfile: COPY pyproject.toml README.md, platform, workers.
IMAGE_SOURCES = ("pyproject.toml", "README.md", "platform", "workers")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    source = tmp_path_factory.mktemp("source")
    for name in IMAGE_SOURCES:
        path = ROOT / name
        if path.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out)]
    subprocess.run([*command, str(source)], check=True, capture_output=True, timeout=300)
    (built,) = out.glob("toolsift-*.whl")
    with zipfile.ZipFile(built) as archive:
        return archive.namelist()


def test_the_wheel_carries_what_the_app_reads_at_run_time(wheel: list[str]) -> None:
    sources = sorted(p.relative_to(ROOT / "platform").as_posix() for p in _runtime_files())
    assert sources, "no SQL, tokenizer or static files found in the source tree"
    assert [s for s in sources if s not in wheel] == []


def test_the_wheel_carries_no_benchmark_or_evaluation_code(wheel: list[str]) -> None:
    assert (ROOT / "tooling" / "toolsift_tooling" / "bench" / "vocabulary.py").is_file()
    places = ("toolsift_tooling/", "toolsift/bench/", "toolsift/eval/")
    assert [n for n in wheel if n.startswith(places) or n.endswith("vocabulary.py")] == []
    assert any(n.startswith("toolsift/selection/") for n in wheel)


def _runtime_files() -> list[Path]:
    package = ROOT / "platform" / "toolsift"
    found = [*package.rglob("*.sql"), *package.glob("embedding/data/*")]
    found += [*package.glob("analytics/static/*"), *package.glob("demo/*.jsonl")]
    return [p for p in found if p.is_file()]
