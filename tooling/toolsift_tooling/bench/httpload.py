"""Concurrent HTTP clients against POST /v1/select, bounded in time and in count.

Threads with one keep-alive urllib3 connection each: the loop is short and the work is
waiting on the socket, so the GIL costs little. Bodies are encoded up front, and the select
clients use urllib3 rather than httpx, to keep the generator cheap on a machine whose cores
it shares with the server it measures (httpx cost about 1.3 ms of CPU per request here,
urllib3 about a quarter of that).
"""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import urllib3

from .stats import CpuMeter, Latency
from .synthetic import Query

K = 5
BUDGET_TOKENS = 4000


@dataclass(frozen=True)
class Job:
    """One prepared request: whose key, which body, which tool it should find."""

    authorization: str
    body: bytes
    target: str | None


def job(agent_key: str, query: Query, mode: str = "bm25") -> Job:
    body = {
        "messages": [{"role": "user", "content": query.text}],
        "k": K,
        "budget_tokens": BUDGET_TOKENS,
        "mode": mode,
    }
    return Job(f"Bearer {agent_key}", json.dumps(body).encode(), query.target)


@dataclass
class HttpResult:
    concurrency: int
    seconds: float
    ok: int
    errors: int
    latency: Latency
    first_error: str | None = None
    hits: int = 0
    judged: int = 0
    cpu_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        return self.ok / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "seconds": self.seconds,
            "ok": self.ok,
            "errors": self.errors,
            "first_error": self.first_error,
            "selects_per_second": self.throughput,
            "latency_ms": self.latency.as_dict(),
            "hit_at_k": self.hits / self.judged if self.judged else None,
            "cpu_seconds": self.cpu_seconds,
            "cpu_ms_per_select": {
                k: v * 1000 / self.ok if self.ok else None for k, v in self.cpu_seconds.items()
            },
        }


def _connection(base_url: str, timeout: float) -> urllib3.HTTPConnectionPool:
    """One keep-alive connection, never retried: a failure is a sample, not a second try."""
    address = urlsplit(base_url)
    return urllib3.HTTPConnectionPool(
        str(address.hostname), address.port, maxsize=1, timeout=timeout, retries=False
    )


def _send(
    client: urllib3.HTTPConnectionPool, method: str, path: str, body: bytes, authorization: str
) -> tuple[int | None, str | None, bytes]:
    """(status, failure or None, body); status None: no HTTP answer (refused, reset, timeout)."""
    headers = {"authorization": authorization, "content-type": "application/json"}
    try:
        response = client.urlopen(method, path, body=body, headers=headers)
    except urllib3.exceptions.HTTPError as error:
        return None, f"{type(error).__name__}: {error}", b""
    if response.status != 200:
        return response.status, f"HTTP {response.status}: {response.data[:200]!r}", response.data
    return response.status, None, response.data


def check_local(url: str) -> None:
    """The load run may only ever hit this machine."""
    if urlsplit(url).hostname != "127.0.0.1":
        raise ValueError(f"refusing to load {url}: only 127.0.0.1 is allowed")


def run(
    base_url: str,
    jobs: list[Job],
    *,
    concurrency: int,
    duration: float,
    max_requests: int,
    warmup: float,
    meter: CpuMeter | None = None,
    judge: bool = False,
) -> HttpResult:
    """Warm up for `warmup` s, then measure for `duration` s or `max_requests`, whichever first.

    `judge` parses each answer to count whether the query's target came back (hit@k): only
    for the concurrency-1 pass, where the client's JSON work cannot crowd the server.
    """
    check_local(base_url)
    if not jobs:
        raise ValueError("no requests to send")
    sequence = itertools.count()  # next() on a count is atomic under the GIL
    tickets = itertools.count()
    stop = threading.Event()
    measure_from = time.perf_counter() + warmup
    until = measure_from + duration
    samples: list[list[float]] = [[] for _ in range(concurrency)]
    errors = [0] * concurrency
    hits = [0] * concurrency
    judged = [0] * concurrency
    ends = [measure_from] * concurrency
    first_error: list[str] = []

    def client_loop(slot: int) -> None:
        with _connection(base_url, 30.0) as client:
            while not stop.is_set():
                started = time.perf_counter()
                if started >= until:
                    return
                measured = started >= measure_from
                if measured and next(tickets) >= max_requests:
                    return
                item = jobs[next(sequence) % len(jobs)]
                _, failure, data = _send(
                    client, "POST", "/v1/select", item.body, item.authorization
                )
                finished = time.perf_counter()
                if not measured:
                    continue
                ends[slot] = finished
                if failure is not None:
                    errors[slot] += 1
                    if not first_error:
                        first_error.append(failure)
                    continue
                samples[slot].append((finished - started) * 1000)
                if judge and item.target is not None:
                    judged[slot] += 1
                    names = {t.get("name") for t in json.loads(data)["tools"]}
                    hits[slot] += item.target in names

    threads = [
        threading.Thread(target=client_loop, args=(i,), name=f"client-{i}", daemon=True)
        for i in range(concurrency)
    ]
    for thread in threads:
        thread.start()
    try:
        time.sleep(max(0.0, measure_from - time.perf_counter()))
        if meter is not None:
            meter.start()
        for thread in threads:
            thread.join()
    finally:
        stop.set()
    cpu = meter.stop() if meter is not None else {}
    latencies = [s for per_client in samples for s in per_client]
    return HttpResult(
        concurrency=concurrency,
        seconds=max(ends) - measure_from,
        ok=len(latencies),
        errors=sum(errors),
        latency=Latency.of(latencies),
        first_error=first_error[0] if first_error else None,
        hits=sum(hits),
        judged=sum(judged),
        cpu_seconds=cpu,
    )


# --- mixed traffic: selects and admin writes, for `toolsift bench load` -----------------------


@dataclass(frozen=True)
class Writer:
    """A tenant's admin key, for the writes of the mixed run."""

    tenant: str  # an id, as text
    authorization: str


@dataclass
class Sample:
    """One request of the mixed run: what, when (s since the start), how long, how it ended."""

    kind: str  # "select" or "write"
    at: float
    ms: float
    status: int | None  # None: no HTTP answer (connection refused, reset, timeout)
    failure: str | None = None
    tenant: str | None = None  # writes: whose catalog
    tool: str | None = None  # writes: the tool created


def _write_body(name: str) -> bytes:
    tool = {
        "name": name,
        "description": f"Load-run tool {name}: record the order status and refund the payment.",
        "input_schema": {"type": "object", "properties": {"ref": {"type": "string"}}},
        "examples": [f"{name} please"],
    }
    return json.dumps({"tools": [tool]}).encode()


def run_mixed(
    base_url: str,
    selects: list[Job],
    writers: list[Writer],
    *,
    clients: int,
    duration: float,
    write_share: float,
    seed: int,
    timeout: float = 10.0,
    started: float | None = None,
    rate: float | None = None,
) -> list[Sample]:
    """`clients` threads for `duration` s; each request is a write with probability
    `write_share` (PUT /admin/v1/tools creating a tool of a random tenant, by a unique name),
    otherwise the next select. Every request is kept, failures included, for the caller to
    judge (faults are judged by when and how requests failed). `started`: the
    `time.perf_counter()` the samples' times count from (default: now).

    Without `rate` each client sends its next request as soon as the last is answered (a
    closed loop: the server's throughput sets the pace, and latency is clients / throughput).
    With `rate`, requests are due on a fixed schedule of `rate` per second in all, spread
    evenly over the clients (an open loop, at most `clients` in flight), and latency counts
    from when a request was due: a client held up by a slow answer sends late, and that
    wait is the server's (no coordinated omission)."""
    if rate is not None and rate <= 0:
        raise ValueError("rate must be positive")
    check_local(base_url)
    if not selects or (write_share > 0 and not writers):
        raise ValueError("no requests to send")
    sequence = itertools.count()
    per_client: list[list[Sample]] = [[] for _ in range(clients)]
    start = time.perf_counter() if started is None else started
    until = start + duration

    def client_loop(slot: int) -> None:
        rng = random.Random(f"{seed}:{slot}")
        samples = per_client[slot]
        written = 0
        with _connection(base_url, timeout) as client:
            for turn in itertools.count():
                if rate is None:
                    began = time.perf_counter()
                else:
                    began = start + (turn * clients + slot) / rate
                    if (wait := began - time.perf_counter()) > 0:
                        time.sleep(wait)
                if began >= until:
                    break
                tenant = tool = None
                if rng.random() < write_share:
                    writer = rng.choice(writers)
                    written += 1
                    kind, tenant, tool = "write", writer.tenant, f"load_{slot}_{written}"
                    method, path = "PUT", "/admin/v1/tools"
                    authorization, body = writer.authorization, _write_body(tool)
                else:
                    item = selects[next(sequence) % len(selects)]
                    kind, method, path = "select", "POST", "/v1/select"
                    authorization, body = item.authorization, item.body
                status, failure, _ = _send(client, method, path, body, authorization)
                finished = time.perf_counter()
                samples.append(
                    Sample(
                        kind,
                        began - start,
                        (finished - began) * 1000,
                        status,
                        failure,
                        tenant,
                        tool,
                    )
                )

    threads = [
        threading.Thread(target=client_loop, args=(i,), name=f"client-{i}", daemon=True)
        for i in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted((s for per in per_client for s in per), key=lambda s: s.at)
