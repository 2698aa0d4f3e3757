"""What `toolsift bench` does with a verdict: its exit code, what it prints, what it refuses.

The measurements are replaced by fixed figures, so a FAIL is certain and the test takes
milliseconds; the end-to-end runs are in test_synthetic.py, test_embed_bench.py and
tests/ops/test_load.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from toolsift.cli import app
from toolsift_tooling.bench import cli, embed, loadrun
from toolsift_tooling.bench.report import render
from toolsift_tooling.bench.run import targets
from toolsift_tooling.bench.stats import Latency


def _http(ms: float, per_second: float, concurrency: int) -> dict[str, Any]:
    return {
        "concurrency": concurrency,
        "seconds": 1.0,
        "ok": 100,
        "errors": 0,
        "first_error": None,
        "selects_per_second": per_second,
        "latency_ms": Latency.of([ms, ms, ms]).as_dict(),
        "hit_at_k": 0.8,
        "cpu_seconds": {},
        "cpu_ms_per_select": {},
    }


def select_result(modes: tuple[str, ...], ms: float = 1.0, per_second: float = 900.0) -> dict:
    """Figures of a `bench select` run on the big catalog, shaped as run.benchmark's."""
    runs = [
        {
            "server": "current",
            "mode": mode,
            "http": _http(ms, per_second, 8),
            "http_c1": _http(ms, per_second / 4, 1),
        }
        for mode in modes
    ]
    first = next((r for r in runs if r["mode"] == "bm25"), runs[0])
    group = {
        "key": "big",
        "label": "big (1,000 tools)",
        "tools": 1000,
        "queries": 40,
        "mode": first["mode"],
        "http": first["http"],
        "http_c1": first["http_c1"],
        "runs": runs,
        "inprocess": {
            "score_ms": Latency.of([0.5]).as_dict(),
            "service_ms": Latency.of([0.8]).as_dict(),
        },
        "bm25s": {
            "selects_per_second": 2000.0,
            "latency_ms": Latency.of([0.4]).as_dict(),
            "hit_at_k": 0.7,
        },
        "ratios": {
            "throughput_toolsift_over_bm25s": None,
            "p50_http_loaded_over_bm25s": None,
            "p50_http_c1_over_bm25s": None,
            "p50_sql_score_over_bm25s": None,
        },
    }
    result: dict[str, Any] = {
        "machine": {
            "date": "2026-12-05T00:00:00+00:00",
            "nproc": 2,
            "cpu_model": "test",
            "memory_gib": 8,
            "python": "3.11",
            "loadavg_start": [0, 0, 0],
        },
        "options": {"seed": 7, "workers": 1, "concurrency": 8, "modes": list(modes)},
        "load": {
            "tenants": 1,
            "tools": 1000,
            "by_class": {},
            "tools_per_second": 1000.0,
            "upsert_seconds": 1.0,
            "setup_seconds": 0.1,
            "analyze_seconds": 0.1,
            "validate_ms_per_tool": 0.1,
        },
        "groups": [group],
        "bm25s_version": "0.3.16",
        "seconds": 3.0,
    }
    result["targets"] = targets(result)
    return result


def embed_result(tools_per_s: float) -> dict[str, Any]:
    """Figures of a `bench embed` run, shaped as embed.benchmark's."""
    throughput = {
        "tools": 256.0,
        "tools_timed": 200.0,
        "seconds": 200 / tools_per_s,
        "tools_per_s": tools_per_s,
        "worker_cpu_s": 1.0,
        "postgres_cpu_s": 0.2,
        "tools_per_worker_cpu_s": 200.0,
        "in_process_tools_per_s": 300.0,
        "in_process_tools_per_cpu_s": 300.0,
        "pipeline_over_in_process": tools_per_s / 300,
        "pipeline_over_in_process_cpu": 200 / 300,
    }
    freshness = {
        "updates": 10.0,
        "achieved_rate": 5.0,
        "p50_s": 0.2,
        "p95_s": 0.4,
        "max_s": 0.5,
        "unresolved": 0.0,
    }
    return {
        "options": {"stream_workers": 2},
        "model": "test-model",
        "throughput": throughput,
        "freshness": freshness,
        "targets": [
            {
                "name": "embedding throughput per worker core >= 200 tools/s",
                "value": tools_per_s,
                "pass": tools_per_s >= 200,
            },
            {"name": "freshness p95 < 2 s", "value": 0.4, "pass": True},
        ],
    }


@pytest.mark.parametrize(("ms", "code"), [(1.0, 0), (50.0, 1)])
def test_select_exits_1_on_a_fail_after_printing_and_writing_the_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ms: float, code: int
) -> None:
    monkeypatch.setattr(cli, "benchmark", lambda options, log: select_result(("bm25",), ms=ms))
    out = tmp_path / "figures.json"
    outcome = CliRunner().invoke(app, ["bench", "select", "--json", str(out)])
    assert outcome.exit_code == code, outcome.output
    assert ("FAIL" in outcome.output) == bool(code)
    assert "Targets" in outcome.output
    assert json.loads(out.read_text())["targets"]


@pytest.mark.parametrize("modes", [("dense",), ("bm25", "dense")])
def test_select_exits_1_when_requests_failed_in_a_run_no_target_judges(
    monkeypatch: pytest.MonkeyPatch, modes: tuple[str, ...]
) -> None:
    failed = select_result(modes)
    dense = next(r for r in failed["groups"][0]["runs"] if r["mode"] == "dense")
    dense["http"].update(ok=0, errors=5000)
    dense["http"]["first_error"] = "ProtocolError: ('Connection aborted.')"
    monkeypatch.setattr(cli, "benchmark", lambda options, log: failed)
    outcome = CliRunner().invoke(app, ["bench", "select", "--modes", ",".join(modes)])
    assert outcome.exit_code == 1, outcome.output
    # The run is named, with the error that tells why it measured nothing.
    assert "current dense, http: 5000 errors, first: ProtocolError" in outcome.output
    # The same figures without the errors pass.
    clean = select_result(modes)
    monkeypatch.setattr(cli, "benchmark", lambda options, log: clean)
    assert CliRunner().invoke(app, ["bench", "select", "--modes", ",".join(modes)]).exit_code == 0


@pytest.mark.parametrize(("rate", "code"), [(250.0, 0), (110.0, 1)])
def test_embed_exits_1_on_a_fail_after_printing_and_writing_the_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rate: float, code: int
) -> None:
    monkeypatch.setattr(embed, "benchmark", lambda options, log: embed_result(rate))
    out = tmp_path / "figures.json"
    outcome = CliRunner().invoke(app, ["bench", "embed", "--json", str(out)])
    assert outcome.exit_code == code, outcome.output
    assert ("FAIL" in outcome.output) == bool(code)
    assert json.loads(out.read_text())["targets"]


def _must_not_run(options: object, log: object) -> dict[str, Any]:
    raise AssertionError("the benchmark started")


@pytest.mark.parametrize("command", ["select", "embed", "load"])
@pytest.mark.parametrize("where", ["directory", "under a file", "/proc"])
def test_an_unwritable_json_path_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, where: str
) -> None:
    monkeypatch.setattr(cli, "benchmark", _must_not_run)
    monkeypatch.setattr(embed, "benchmark", _must_not_run)
    monkeypatch.setattr(loadrun, "benchmark", _must_not_run)
    (tmp_path / "file").write_text("")
    path = {
        "directory": str(tmp_path),
        "under a file": str(tmp_path / "file" / "figures.json"),
        "/proc": "/proc/toolsift-figures.json",
    }[where]
    outcome = CliRunner().invoke(app, ["bench", command, "--json", path])
    assert outcome.exit_code == 2, outcome.output
    assert "--json" in outcome.output
    assert "Traceback" not in outcome.output


@pytest.mark.parametrize(
    ("modes", "judged"),
    [
        (("hybrid",), {"hybrid"}),
        (("bm25",), {"bm25"}),
        (("bm25", "hybrid"), {"bm25", "hybrid"}),
        (("dense",), set()),
    ],
)
def test_only_the_modes_measured_are_judged_and_titled(
    modes: tuple[str, ...], judged: set[str]
) -> None:
    result = select_result(modes)
    named = {
        m for t in result["targets"] for m in ("bm25", "hybrid") if f" {m} " in f" {t['target']} "
    }
    assert named == judged
    console = Console(record=True, width=200)
    render(result, console)
    printed = console.export_text()
    headline = "bm25" if "bm25" in modes else modes[0]
    assert f"(mode {headline}," in printed
    for other in {"bm25", "dense", "hybrid"} - {headline}:
        assert f"(mode {other}," not in printed


@pytest.mark.parametrize("fault_at", ["8", "9.5"])
def test_a_fault_at_or_after_the_end_of_the_traffic_is_refused(
    monkeypatch: pytest.MonkeyPatch, fault_at: str
) -> None:
    monkeypatch.setattr(loadrun, "benchmark", _must_not_run)
    argv = ["bench", "load", "--duration", "8", "--fault", "worker-kill", "--fault-at", fault_at]
    outcome = CliRunner().invoke(app, argv)
    assert outcome.exit_code == 2, outcome.output
    assert "--fault-at" in outcome.output


def test_embed_prints_the_tools_and_seconds_its_rate_is_made_of() -> None:
    console = Console(record=True, width=200)
    embed.render_embed(embed_result(110.0), console)
    printed = console.export_text()
    rate = re.search(r"pipeline tools/s[^│]*│ (\d+)", printed)
    span = re.search(r"(\d+) tools in ([\d.]+) s", printed)
    assert rate is not None, printed
    assert span is not None, printed
    tools, seconds = int(span.group(1)), float(span.group(2))
    assert tools / seconds == pytest.approx(int(rate.group(1)), rel=0.05), printed


def test_a_baseline_ref_that_names_no_commit_is_refused_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli, "benchmark", _must_not_run)
    outcome = CliRunner().invoke(app, ["bench", "select", "--baseline-ref", "nosuchref"])
    assert outcome.exit_code == 2, outcome.output
    assert "--baseline-ref" in outcome.output
    assert "nosuchref" in outcome.output


def test_an_unknown_embedding_model_is_refused_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli, "benchmark", _must_not_run)
    outcome = CliRunner().invoke(app, ["bench", "select", "--embedding-model", "bge-large"])
    assert outcome.exit_code == 2, outcome.output
    assert "--embedding-model" in outcome.output
    assert "bge-large" in outcome.output


def test_the_embedding_model_reaches_the_benchmark(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def run(options: Any, log: object) -> dict[str, Any]:
        asked.append(options.embedding_model)
        return select_result(("bm25",))

    monkeypatch.setattr(cli, "benchmark", run)
    model = "all-MiniLM-L6-v2-int8-dynamic+bge-small-en-v1.5-int8"
    outcome = CliRunner().invoke(app, ["bench", "select", "--embedding-model", model])
    assert outcome.exit_code == 0, outcome.output
    outcome = CliRunner().invoke(app, ["bench", "select"])
    assert outcome.exit_code == 0, outcome.output
    assert asked == [model, "all-MiniLM-L6-v2-int8-dynamic"]


def test_a_baseline_ref_that_names_a_commit_is_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str | None] = []

    def run(options: Any, log: object) -> dict[str, Any]:
        asked.append(options.baseline_ref)
        return select_result(("bm25",))

    monkeypatch.setattr(cli, "benchmark", run)
    outcome = CliRunner().invoke(app, ["bench", "select", "--baseline-ref", "HEAD"])
    assert outcome.exit_code == 0, outcome.output
    assert asked == ["HEAD"]


def test_figures_nothing_was_measured_for_are_written_as_null(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run without writes has no write latency: the file says null, not NaN, which no
    strict JSON reader (jq, a browser) accepts."""
    figures = {"writes": {"latency_ms": Latency.of([]).as_dict()}, "checks": {}}
    monkeypatch.setattr(loadrun, "benchmark", lambda options, log: figures)
    monkeypatch.setattr(loadrun, "render", lambda result, console: None)
    out = tmp_path / "figures.json"
    outcome = CliRunner().invoke(app, ["bench", "load", "--write-share", "0", "--json", str(out)])
    assert outcome.exit_code == 0, outcome.output

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the figures")

    written = json.loads(out.read_text(), parse_constant=refuse)
    assert written["writes"]["latency_ms"] == {
        "count": 0, "mean": None, "p50": None, "p95": None, "p99": None, "max": None,
    }  # fmt: skip
