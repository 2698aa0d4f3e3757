"""`toolsift bench select` end to end: stack, load, HTTP load, baselines, figures.

The figures come back as one JSON-ready dict; `report` renders it. Nothing here hard-codes
a result: targets are thresholds, PASS/FAIL is decided on what this run measured.
"""

from __future__ import annotations

import contextlib
import io
import os
import platform
import random
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import text

from toolsift.db import Database
from toolsift.embedding import local

from . import baseline, httpload, inprocess
from .load import Tenant, analyze, embed_all, load_all, validation_cost
from .stack import ApiServer, postmaster_pid, sigterm_as_interrupt, start_database
from .stats import CpuMeter
from .synthetic import Catalog, Query, Sizes, generate

PEPPER = "toolsift-bench-pepper-0123456789abcdef"  # production wants 32+ characters
#: (group key, metric, limit): "p50" limits are in ms, "throughput" ones in selects/s.
TARGETS: tuple[tuple[str, str, float], ...] = (
    ("big", "p50", 5.0),
    ("huge", "p50", 15.0),
    ("big", "throughput", 500.0),
    ("huge", "throughput", 500.0),
    ("mix", "throughput", 500.0),
    ("big", "hybrid p50", 15.0),
)
MODES = ("bm25", "dense", "hybrid")
REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Options:
    seed: int = 7
    concurrency: int = 8
    duration: float = 10.0
    max_requests: int = 100_000
    workers: int = 2
    sizes: Sizes = field(default_factory=Sizes)
    explain: bool = False
    #: Select modes measured over HTTP; the in-process layers and bm25s are BM25 only.
    modes: tuple[str, ...] = ("bm25",)
    #: A git revision whose API is served on the same database and measured alongside.
    baseline_ref: str | None = None
    #: The local model catalogs and queries are embedded with (dense and hybrid).
    embedding_model: str = local.DEFAULT_MODEL


@dataclass
class Group:
    """A catalog (or the mix of small ones) and its queries, in request order."""

    key: str
    label: str
    tools: int
    work: list[tuple[Tenant, Query]]


def _clamp(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))


def machine() -> dict[str, Any]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "platform": platform.platform(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def groups(tenants: list[Tenant], seed: int) -> list[Group]:
    """The big catalog, the huge one, and the small ones interleaved as one mixed workload."""
    found: list[Group] = []
    small = [t for t in tenants if t.catalog.name.startswith("small-")]
    for key in ("big", "huge"):
        for tenant in tenants:
            if tenant.catalog.name == key and tenant.catalog.queries:
                work = [(tenant, q) for q in tenant.catalog.queries]
                size = len(tenant.catalog.tools)
                found.append(Group(key, f"{key} ({size:,} tools)", size, work))
    if small:
        mixed = [(t, q) for t in small for q in t.catalog.queries]
        random.Random(f"toolsift-bench:{seed}:mix").shuffle(mixed)
        sizes = [len(t.catalog.tools) for t in small]
        label = f"mix ({len(small)} tenants, {min(sizes)}-{max(sizes)} tools)"
        found.append(Group("mix", label, round(sum(sizes) / len(sizes)), mixed))
    return found


def _indexes(group: Group) -> list[tuple[baseline.Bm25sIndex, Query]]:
    built: dict[str, baseline.Bm25sIndex] = {}
    work = []
    for tenant, query in group.work:
        name = tenant.catalog.name
        if name not in built:
            built[name] = baseline.Bm25sIndex(tenant.catalog)
        work.append((built[name], query))
    return work


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def _http_over_bm25s(entry: dict[str, Any], base: baseline.BaselineResult) -> dict[str, Any]:
    """bm25s is BM25: another mode's HTTP figures divided by its would compare unlike work."""
    http, single = entry["http"], entry["http_c1"]
    ratios = {
        "throughput_toolsift_over_bm25s": _ratio(http["selects_per_second"], base.throughput),
        "p50_http_loaded_over_bm25s": _ratio(http["latency_ms"]["p50"], base.latency.p50),
        "p50_http_c1_over_bm25s": _ratio(single["latency_ms"]["p50"], base.latency.p50),
    }
    return ratios if entry["mode"] == "bm25" else dict.fromkeys(ratios)


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """PASS/FAIL per target, on the loaded run and (for information) the unloaded one;
    the targets of a mode that was not measured are left out."""
    verdicts = []
    by_key = {g["key"]: g for g in result["groups"]}
    for key, metric, limit in TARGETS:
        group = by_key.get(key)
        if group is None:
            continue
        mode = "hybrid" if metric.startswith("hybrid") else "bm25"
        found = [r for r in group["runs"] if r["server"] == "current" and r["mode"] == mode]
        if not found:
            continue  # a mode not measured is not judged
        loaded, single = found[0]["http"], found[0]["http_c1"]
        runs = [("loaded", loaded)]
        if metric.endswith("p50"):
            runs.append(("unloaded", single))
        for run_name, run in runs:
            if metric.endswith("p50"):
                value = run["latency_ms"]["p50"]
                passed = value < limit
                name = f"{mode} p50 < {limit:g} ms at {group['tools']:,} tools"
            else:
                value = run["selects_per_second"]
                passed = value >= limit
                name = f">= {limit:g} {mode} selects/s, {group['label']}"
            verdicts.append(
                {
                    "target": name,
                    "run": f"{run_name} (concurrency {run['concurrency']})",
                    "value": value,
                    "passed": passed and run["errors"] == 0,
                }
            )
    return verdicts


def resolve_commit(ref: str) -> str:
    """The commit `ref` names in this repository; CalledProcessError when it names none."""
    return subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def baseline_source(ref: str, work_dir: Path) -> tuple[Path, str]:
    """`platform/` of a git revision of this repository, to serve as the baseline API."""
    commit = resolve_commit(ref)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit, "platform"], check=True, capture_output=True
    ).stdout
    target = work_dir / "baseline"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target / "platform", commit


def benchmark(options: Options, log: Callable[[str], None]) -> dict[str, Any]:
    """Run everything; every server started here is stopped before this returns or raises."""
    result: dict[str, Any] = {"machine": machine(), "options": asdict(options)}
    started = time.perf_counter()
    catalogs: list[Catalog] = generate(options.sizes, seed=options.seed)
    result["generate_seconds"] = time.perf_counter() - started
    total = sum(len(c.tools) for c in catalogs)
    log(f"generated {len(catalogs)} tenants, {total:,} tools (seed {options.seed})")
    warmup = _clamp(options.duration * 0.2, 0.2, 3.0)
    unloaded = _clamp(options.duration * 0.3, 0.3, 5.0)
    sampled = int(_clamp(options.duration * 30, 20, 300))  # in-process queries per layer
    with sigterm_as_interrupt(), contextlib.ExitStack() as stack:
        work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolsift-bench-")))
        server, url = start_database(work_dir / "pg", stack)
        database = Database(url, pool_size=2)
        stack.callback(database.dispose)
        with database.engine.connect() as conn:
            result["machine"]["postgres"] = conn.execute(text("SHOW server_version")).scalar_one()
        log(f"embedded PostgreSQL {result['machine']['postgres']} up; loading tenants")

        tenants, load = load_all(database, catalogs, pepper=PEPPER)
        load.analyze_seconds = analyze(url)
        load.validate_ms_per_tool = validation_cost(catalogs)
        result["load"] = {
            "tenants": load.tenants,
            "tools": load.tools,
            "setup_seconds": load.setup_seconds,
            "upsert_seconds": load.upsert_seconds,
            "tools_per_second": load.tools_per_second,
            "by_class": load.by_class(),
            "batches": load.tenant_batches,
            "analyze_seconds": load.analyze_seconds,
            "validate_ms_per_tool": load.validate_ms_per_tool,
        }
        log(f"loaded {load.tools:,} tools at {load.tools_per_second:,.0f} tools/s")
        if any(m != "bm25" for m in options.modes):
            seconds, embedded = embed_all(database, tenants, model=options.embedding_model)
            result["load"]["embed_seconds"] = seconds
            result["load"]["embedded"] = embedded
            log(
                f"embedded {embedded:,} tools in {seconds:.0f} s"
                f" ({options.embedding_model}, in-process)"
            )

        model_settings = {"embedding_onnx_model": options.embedding_model}
        api = ApiServer(
            url, workers=options.workers, pepper=PEPPER, work_dir=work_dir, settings=model_settings
        )
        stack.callback(api.stop)
        api.start()
        log(f"API up at {api.url} ({options.workers} uvicorn workers)")
        servers = [("current", api)]
        if options.baseline_ref:
            source, commit = baseline_source(options.baseline_ref, work_dir)
            result["baseline"] = {"ref": options.baseline_ref, "commit": commit}
            base_dir = work_dir / "baseline-api"
            base_dir.mkdir()
            base_api = ApiServer(
                url, workers=options.workers, pepper=PEPPER, work_dir=base_dir, app_dir=source,
                settings=model_settings,
            )  # fmt: skip
            stack.callback(base_api.stop)
            base_api.start()
            log(f"baseline API ({options.baseline_ref} = {commit[:10]}) up at {base_api.url}")
            servers.append(("baseline", base_api))
        pg_pid = postmaster_pid(server)
        result["groups"] = []
        turn = 0
        for group in groups(tenants, options.seed):
            runs: list[dict[str, Any]] = []
            for mode in options.modes:
                jobs = [httpload.job(t.agent_key, q, mode) for t, q in group.work]
                measured: dict[str, dict[str, Any]] = {name: {} for name, _ in servers}
                # Interleaved, so both servers see the same machine load, as far as it goes;
                # who goes first alternates, since the first warms PostgreSQL for the second.
                order = servers if turn % 2 == 0 else servers[::-1]
                turn += 1
                for concurrency in (options.concurrency, 1):
                    for name, target in order:
                        log(f"{group.label}: {name} {mode} over HTTP, concurrency {concurrency}")
                        meter = CpuMeter(
                            {
                                "api": (target.pids(), True),
                                "postgres": ([pg_pid] if pg_pid else [], True),
                                "load generator": ([os.getpid()], False),
                            }
                        )
                        loaded = concurrency > 1
                        run = httpload.run(
                            target.url, jobs, concurrency=concurrency,
                            duration=options.duration if loaded else unloaded,
                            max_requests=options.max_requests,
                            warmup=warmup if loaded else 0.2,
                            meter=meter if loaded else None, judge=not loaded,
                        )  # fmt: skip
                        measured[name]["http" if loaded else "http_c1"] = run.as_dict()
                runs += [{"server": name, "mode": mode, **measured[name]} for name, _ in servers]
            # The group's headline figures: BM25 when it ran (what bm25s compares with),
            # else the first mode measured, named by "mode".
            headline = next(
                (r for r in runs if r["server"] == "current" and r["mode"] == "bm25"), runs[0]
            )
            result["groups"].append(
                {
                    "key": group.key,
                    "label": group.label,
                    "tools": group.tools,
                    "queries": len(group.work),
                    "mode": headline["mode"],
                    "http": headline["http"],
                    "http_c1": headline["http_c1"],
                    "runs": runs,
                }
            )
        for _, target in servers:
            target.stop()  # the in-process layers and bm25s get the cores to themselves

        for group, entry in zip(groups(tenants, options.seed), result["groups"], strict=True):
            log(f"{group.label}: in-process SQL and service layers")
            layers = inprocess.measure(
                database, group.work, max_queries=sampled, warmup=min(20, sampled // 2)
            )
            entry["inprocess"] = layers.as_dict()
            if any(m != "bm25" for m in options.modes):
                log(f"{group.label}: query embedding in-process, uncached")
                entry["embed_ms"] = inprocess.embed_cost(
                    group.work, max_queries=sampled, model=options.embedding_model
                )
            log(f"{group.label}: bm25s baseline")
            work = _indexes(group)
            base = baseline.run(
                work, k=httpload.K, duration=_clamp(options.duration * 0.5, 0.2, 5.0),
                max_requests=options.max_requests,
            )  # fmt: skip
            entry["bm25s"] = base.as_dict()
            entry["ratios"] = {
                **_http_over_bm25s(entry, base),
                "p50_sql_score_over_bm25s": _ratio(layers.score.p50, base.latency.p50),
            }
            if options.explain and group.key in ("big", "huge"):
                tenant, query = next((t, q) for t, q in group.work if q.target is not None)
                entry["explain"] = {
                    "query": query.text,
                    "plan": inprocess.explain(database, tenant, query),
                }
        result["bm25s_version"] = baseline.bm25s_version()
    result["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    result["targets"] = targets(result)
    result["seconds"] = time.perf_counter() - started
    return result
