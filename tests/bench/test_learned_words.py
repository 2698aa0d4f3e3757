"""`benchmarks/learned_words.py` end to end with tiny sizes: both states run, and the words
state holds the learned words' postings on top of the others."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from toolsift.lexical.analysis import LEARNED_TERMS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_measures_a_select_with_and_without_learned_words() -> None:
    argv = [
        sys.executable, str(ROOT / "benchmarks" / "learned_words.py"),
        "--small-tenants", "2", "--big", "30", "--huge", "40", "--learned", "3",
        "--rounds", "2", "--calls", "5",
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=170, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"^30 tools, 90 learned queries$", proc.stdout, re.MULTILINE)
    postings = dict(re.findall(r"^(none|words)\s+postings\s+([\d,]+)", proc.stdout, re.MULTILINE))
    none, words = (int(postings[state].replace(",", "")) for state in ("none", "words"))
    assert none < words <= none + 30 * LEARNED_TERMS
    assert re.search(r"^words / none: \d+\.\d+ ", proc.stdout, re.MULTILINE)
