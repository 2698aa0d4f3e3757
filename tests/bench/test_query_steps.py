"""`benchmarks/query_steps.py` with tiny sizes: it runs, finds the steps and prints both sides."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_times_requests_alone_and_with_their_steps() -> None:
    argv = [sys.executable, str(ROOT / "benchmarks" / "query_steps.py"), "--steps", "5",
            "--requests", "3", "--rounds", "2"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=110, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "3 requests of 5 sentences (5.0 steps found, at most 8)" in proc.stdout
    for side in ("alone", "with steps"):
        figure = re.search(rf"^{side}\s+(\d+\.\d+) CPU ms", proc.stdout, re.MULTILINE)
        assert figure is not None, side
        assert float(figure.group(1)) > 0, side
    assert re.search(r"^with steps / alone \d+\.\d+ ", proc.stdout, re.MULTILINE)
