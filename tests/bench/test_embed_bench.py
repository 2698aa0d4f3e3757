"""`toolsift bench embed` end to end at tiny sizes: every write it streams gets its vector."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def test_bench_embed_runs_and_accounts_for_every_write(tmp_path: Path) -> None:
    out = tmp_path / "embed.json"
    command = [sys.executable, "-m", "toolsift.cli", "bench", "embed"]
    command += ["--tools", "256", "--rate", "5", "--duration", "2", "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    # Exit 1 exactly when a target FAILs: on a busy machine the throughput target may.
    assert done.returncode in (0, 1), done.stdout + done.stderr
    result = json.loads(out.read_text())
    failed = not all(t["pass"] for t in result["targets"])
    assert done.returncode == int(failed), done.stdout + done.stderr
    assert ("FAIL" in done.stdout) == failed
    throughput, freshness = result["throughput"], result["freshness"]
    assert throughput["tools"] == 256
    assert throughput["tools_per_s"] > 0
    # The rate is of the tools landed in the timed window, which it names.
    assert 0 < throughput["tools_timed"] <= throughput["tools"]
    assert throughput["tools_per_s"] == pytest.approx(
        throughput["tools_timed"] / throughput["seconds"]
    )
    assert throughput["in_process_tools_per_s"] > 0
    # The worker's own CPU time in the window: the rate per core on a shared machine.
    assert throughput["worker_cpu_s"] > 0
    assert throughput["tools_per_worker_cpu_s"] >= throughput["tools_per_s"] * 0.5
    assert throughput["in_process_tools_per_cpu_s"] > 0
    # The stream is served by two worker processes (the prefork pool), as deployed.
    assert result["options"]["stream_workers"] == 2
    assert freshness["updates"] == 10
    assert freshness["unresolved"] == 0
    assert 0 < freshness["p50_s"] <= freshness["p95_s"] <= freshness["max_s"]
    assert "freshness p50 / p95 / max s" in done.stdout
