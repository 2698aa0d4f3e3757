"""The mixed run's open loop: requests leave on schedule, and a slow answer's wait counts.

A closed-loop client measures only the time of the requests it manages to send, so a slow
server looks no slower than one answer (coordinated omission). The open loop times each
request from when it was due: a server that answers in 0.2 s, offered 10 requests/s on one
client, must show the queue that builds.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from toolsift_tooling.bench.httpload import Job, run_mixed

ANSWER_SECONDS = 0.2


class _Slow(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the API serves it

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        time.sleep(ANSWER_SECONDS)
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def slow_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


SELECT = [Job("Bearer x", b"{}", None)]


def test_open_loop_sends_on_schedule_and_counts_the_wait(slow_server: str) -> None:
    samples = run_mixed(
        slow_server, SELECT, [], clients=1, duration=1.0, write_share=0.0, seed=1, rate=10.0
    )
    assert [s.status for s in samples] == [200] * 10  # every due request, none skipped
    assert [round(s.at, 3) for s in samples] == [round(i / 10, 3) for i in range(10)]
    # Request i is due at 0.1 i s and answered at about 0.2 (i + 1) s.
    waits = [s.ms / 1000 for s in samples]
    assert waits[-1] > 0.9
    assert waits == sorted(waits)


def test_closed_loop_sends_when_answered(slow_server: str) -> None:
    samples = run_mixed(slow_server, SELECT, [], clients=1, duration=1.0, write_share=0.0, seed=1)
    assert 2 <= len(samples) <= 6  # one at a time, 0.2 s each
    # The median, not the maximum: a shared machine may stall any one request (CI once held
    # one for 0.9 s), and one stall says nothing about the loop.
    assert statistics.median(s.ms for s in samples) < 1000 * ANSWER_SECONDS * 2


def test_open_loop_spreads_the_rate_over_clients(slow_server: str) -> None:
    samples = run_mixed(
        slow_server, SELECT, [], clients=4, duration=2.0, write_share=0.0, seed=1, rate=10.0
    )
    # Every request leaves on the shared schedule, the clients taking turns.
    assert sorted(round(s.at, 3) for s in samples) == [round(i / 10, 3) for i in range(20)]
    # The rate that queues on one client (above), over 4: each is due every 0.4 s and
    # answered in 0.2 s, so no queue builds (a client exactly as busy as its schedule, at
    # 20/s, let a loaded machine's few milliseconds pile up). On one client the same 2 s
    # would put the median wait near 1 s. The median, as above: one stalled request (CI once
    # held one for 0.9 s) delays only its own client's next, and says nothing of the spread.
    assert statistics.median(s.ms for s in samples) < 1000 * ANSWER_SECONDS * 2


def test_a_rate_must_be_positive(slow_server: str) -> None:
    with pytest.raises(ValueError, match="rate"):
        run_mixed(slow_server, SELECT, [], clients=1, duration=1.0, write_share=0.0, seed=1, rate=0)
