"""`benchmarks/select_function_ab.py` end to end with tiny sizes: it runs and both sides answer."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


SQL = ROOT / "platform" / "toolsift" / "selection" / "sql"


def _baseline(folder: Path) -> Path:
    """Today's functions with BM25's scores a hair larger: the same answers, other debug
    scores, which shows the baseline side really ran the baseline's functions."""
    (folder / "toolsift_select.sql").write_text((SQL / "toolsift_select.sql").read_text())
    bm25 = (SQL / "toolsift_bm25.sql").read_text()
    served = "    SELECT s.tool_id, s.score,\n"
    assert bm25.count(served) == 1
    (folder / "toolsift_bm25.sql").write_text(
        bm25.replace(served, "    SELECT s.tool_id, s.score * (1 + 1e-12),\n")
    )
    return folder


@pytest.mark.timeout(180)
def test_compares_a_baseline_s_functions_with_the_current_ones(tmp_path: Path) -> None:
    argv = [
        sys.executable, str(ROOT / "benchmarks" / "select_function_ab.py"),
        str(_baseline(tmp_path)),
        "--small-tenants", "2", "--big", "40", "--huge", "80", "--rounds", "2", "--calls", "5",
        "--http-rounds", "1", "--http-seconds", "0.5", "--compare-queries", "4", "--hybrid",
        "--learned", "2", "--called", "8", "--steps", "2",
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=170, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ratios = re.findall(r"^(big|huge) .* (\d+\.\d+)$", proc.stdout, re.MULTILINE)
    assert [name for name, _ in ratios] == ["big", "huge", "big"]  # the last one hybrid
    assert re.search(r"^big\s+hybrid\+2 ", proc.stdout, re.MULTILINE)
    assert re.search(r"^80 learned queries .*\n318 tool calls ", proc.stdout, re.MULTILINE)
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
    assert float(compared.group(3)) > 0


@pytest.mark.parametrize("baseline", ["folder", "no-such-ref"])
def test_refuses_a_baseline_without_the_functions(tmp_path: Path, baseline: str) -> None:
    source = str(tmp_path) if baseline == "folder" else baseline
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "select_function_ab.py"), source],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "toolsift_bm25.sql" in proc.stderr


def _bench() -> Any:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import select_function_ab
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return select_function_ab


def test_an_older_baseline_takes_the_steps_it_ignores() -> None:
    """Today's call passes 21 arguments: a 20-argument baseline in schema baseline would
    lose the call to today's function in public."""
    with_steps = _bench()._with_steps
    today = (SQL / "toolsift_select.sql").read_text()
    assert with_steps(today) == today
    parameter = ",\n    p_steps vector[] DEFAULT NULL::vector[]\n)"
    assert today.count(parameter) == 1
    before_0033 = today.replace(parameter, "\n)")
    assert with_steps(before_0033) == today
    with pytest.raises(SystemExit):
        with_steps(before_0033.replace("p_elapsed_ms", "p_elapsed"))


def test_an_older_baseline_gets_the_ranked_row_it_was_written_for() -> None:
    _ranked_type = _bench()._ranked_type
    today = (SQL / "toolsift_select.sql").read_text()
    assert _ranked_type([today]) is None
    before_0032 = today.replace("companion_lift", "")
    assert _ranked_type([before_0032]) == (
        "CREATE TYPE toolsift_ranked AS (tool_id uuid, score float8, terms text[],"
        " bm25_rank integer, dense_rank integer, usage_rank integer)"
    )
    before_0030 = before_0032.replace("usage_rank", "")
    assert _ranked_type([before_0030]) == (
        "CREATE TYPE toolsift_ranked AS (tool_id uuid, score float8, terms text[],"
        " bm25_rank integer, dense_rank integer)"
    )


def test_a_baseline_s_bm25_calls_its_own_text_search_function(tmp_path: Path) -> None:
    """A change to `toolsift_text_search` is compared only if each side runs its own."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import select_function_ab
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    _baseline(tmp_path)
    lexical = ROOT / "platform" / "toolsift" / "lexical" / "sql" / "toolsift_text_search.sql"
    without = select_function_ab._baseline_sql(str(tmp_path))
    assert len(without) == 2
    assert "public.toolsift_text_search(" in without[0]
    (tmp_path / lexical.name).write_text(lexical.read_text())
    text_search, bm25, _ = select_function_ab._baseline_sql(str(tmp_path))
    assert text_search.startswith(lexical.read_text().split("CREATE FUNCTION")[0])
    assert "CREATE FUNCTION toolsift_text_search(" in text_search
    assert "public.toolsift_text_search(" not in bm25
    assert "baseline.toolsift_text_search(" in bm25


@pytest.mark.timeout(180)
def test_controls_run_the_current_functions_on_both_sides(tmp_path: Path) -> None:
    """A baseline made costly on purpose: its figure is far below 1, while the controls,
    the current functions against themselves, are not, and say the figure is outside
    them."""
    _baseline(tmp_path)
    select = (tmp_path / "toolsift_select.sql").read_text()
    assert select.count("\nBEGIN\n") == 1
    costly = "\nBEGIN\n    PERFORM count(*) FROM generate_series(1, 200000);\n"
    (tmp_path / "toolsift_select.sql").write_text(select.replace("\nBEGIN\n", costly))
    argv = [
        sys.executable, str(ROOT / "benchmarks" / "select_function_ab.py"), str(tmp_path),
        "--small-tenants", "2", "--big", "40", "--huge", "80", "--rounds", "3", "--calls", "5",
        "--http-rounds", "0", "--controls", "2",
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=170, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    figures = re.findall(r"^(big|huge) .* (\d+\.\d+)$", proc.stdout, re.MULTILINE)
    controls = re.findall(
        r"^\s+controls \(2, current against itself\): (\S+) to (\S+); the figure is (\w+) them$",
        proc.stdout,
        re.MULTILINE,
    )
    assert [name for name, _ in figures] == ["big", "huge"]
    assert len(controls) == 2
    for (_, figure), (low, high, where) in zip(figures, controls, strict=True):
        assert float(figure) < 0.5  # the baseline pays for 200,000 rows a select
        assert 0.5 < float(low) <= float(high) < 2
        assert where == "outside"
