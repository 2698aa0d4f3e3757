"""`benchmarks/select_function_ab.py` end to end with tiny sizes: it runs and both sides answer."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_compares_a_migration_s_functions_with_the_current_ones() -> None:
    argv = [
        sys.executable, str(ROOT / "benchmarks" / "select_function_ab.py"),
        str(ROOT / "migrations" / "versions" / "2026-12-03-1800_select_function.py"),
        "--small-tenants", "2", "--big", "40", "--huge", "80", "--rounds", "2", "--calls", "5",
        "--http-rounds", "1", "--http-seconds", "0.5", "--compare-queries", "4", "--hybrid",
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=170, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ratios = re.findall(r"^(big|huge) .* (\d+\.\d+)$", proc.stdout, re.MULTILINE)
    assert [name for name, _ in ratios] == ["big", "huge", "big"]  # the last one hybrid
    runs = re.findall(
        r"^\s+(baseline|current)\s+(\d+) selects/s.*errors (\d+)$", proc.stdout, re.MULTILINE
    )
    assert sorted(side for side, _, _ in runs) == ["baseline", "baseline", "current", "current"]
    assert all(int(ok) > 0 and errors == "0" for _, ok, errors in runs)
    compared = re.search(
        r"^answers: (\d+) compared, (\d+) differ.* difference (\S+)$", proc.stdout, re.MULTILINE
    )
    assert compared is not None
    assert int(compared.group(1)) > 0
    assert compared.group(2) == "0"
    # 0008 summed unrounded parts: its debug scores differ in the last bits, which shows that
    # the baseline server really ran 0008's functions.
    assert float(compared.group(3)) > 0


def test_refuses_a_file_without_the_functions(tmp_path: Path) -> None:
    other = ROOT / "migrations" / "versions" / "2026-12-03-1850_covering_postings_key.py"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "select_function_ab.py"), str(other)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
