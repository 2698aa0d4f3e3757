"""The bench's throwaway servers go with the bench, however it ends."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from toolsift.embedded._common import process_alive, wait_gone


@pytest.mark.timeout(120)
def test_sigterm_stops_a_bench_s_database(tmp_path: Path) -> None:
    """A benchmark killed with SIGTERM (a timeout, a supervisor) stops its cluster: it was
    left running, and the next run's share of the machine with it."""
    script = (
        "import contextlib, sys, time\n"
        "from pathlib import Path\n"
        "from toolsift_tooling.bench.stack import postmaster_pid, start_database\n"
        "with contextlib.ExitStack() as stack:\n"
        "    server, _ = start_database(Path(sys.argv[1]), stack)\n"
        "    print(postmaster_pid(server), flush=True)\n"
        "    time.sleep(100)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "pg")], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        postmaster = int(proc.stdout.readline())
        assert process_alive(postmaster)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert wait_gone(postmaster, 10), "the bench's PostgreSQL outlived it"
