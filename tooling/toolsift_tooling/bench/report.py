"""Rich tables for the figures `run.benchmark` returns; the same dict goes to --json."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table

from .httpload import BUDGET_TOKENS, K


def _ms(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _hit(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def render(result: dict[str, Any], console: Console) -> None:
    m, o, load = result["machine"], result["options"], result["load"]
    console.print(
        f"[bold]toolsift bench select[/]  {m['date']}  seed {o['seed']}\n"
        f"machine: {m['nproc']} cores ({m['cpu_model']}), {m['memory_gib']} GiB, "
        f"Python {m['python']}, PostgreSQL {m.get('postgres', '?')} (embedded, fsync off)\n"
        f"[yellow]note:[/] the load generator, {o['workers']} uvicorn workers and PostgreSQL "
        f"share these {m['nproc']} cores; every figure below includes that contention.\n"
        f"load average (1/5/15 min) at start {m['loadavg_start']}, at end "
        f"{m.get('loadavg_end', '?')}: anything above the benchmark's own load is other work."
    )
    classes = ", ".join(
        f"{name} {c['tools_per_second']:,.0f} tools/s (slowest batch {c['slowest_batch']:.1f} s)"
        for name, c in load["by_class"].items()
    )
    console.print(
        f"\n[bold]load[/]: {load['tenants']} tenants, {load['tools']:,} tools via tool.upsert "
        f"(batches of up to 1,000, one transaction each): [bold]{load['tools_per_second']:,.0f} "
        f"tools/s[/] overall ({load['upsert_seconds']:.1f} s); by tenant: {classes}. "
        f"Setup of tenants/roles/keys {load['setup_seconds']:.1f} s, then VACUUM ANALYZE "
        f"{load['analyze_seconds']:.1f} s. ToolCreate validation, which PUT /admin/v1/tools "
        f"adds, costs {load['validate_ms_per_tool']:.2f} ms/tool."
    )

    # BM25 when it ran, else the first mode measured (run.benchmark's "headline" runs).
    mode = "/".join(dict.fromkeys(g.get("mode", "bm25") for g in result["groups"])) or "bm25"
    http = Table(
        title=f"POST /v1/select over HTTP (mode {mode}, k={K}, budget {BUDGET_TOKENS}), "
        f"concurrency {o['concurrency']}, {o['workers']} uvicorn workers",
        title_justify="left",
    )
    for column in ("catalog", "selects/s", "p50 ms", "p95 ms", "p99 ms", "errors", "requests"):
        http.add_column(column, justify="left" if column == "catalog" else "right")
    for column in ("CPU ms/select: api", "postgres", "load gen"):
        http.add_column(column, justify="right")
    for g in result["groups"]:
        h = g["http"]
        cpu = h["cpu_ms_per_select"]
        http.add_row(
            g["label"], _rate(h["selects_per_second"]), _ms(h["latency_ms"]["p50"]),
            _ms(h["latency_ms"]["p95"]), _ms(h["latency_ms"]["p99"]), str(h["errors"]),
            f"{h['ok']:,}", _ms(cpu.get("api")), _ms(cpu.get("postgres")),
            _ms(cpu.get("load generator")),
        )  # fmt: skip
    console.print()
    console.print(http)

    runs = [(g, r) for g in result["groups"] for r in g.get("runs", [])]
    if len(runs) > len(result["groups"]):
        _runs_table(result, runs, console)

    layers = Table(title="Where the time goes, p50 ms per select (unloaded)", title_justify="left")
    http_mode = "" if mode == "bm25" else f" {mode}"  # the in-process layers are BM25
    for column in (
        "catalog",
        "SQL score only",
        "service in-process",
        f"HTTP{http_mode}, 1 client",
        f"HTTP{http_mode}, {o['concurrency']} clients",
        "bm25s in-process",
        "hit@5 toolsift",
        "hit@5 bm25s",
    ):
        layers.add_column(column, justify="left" if column == "catalog" else "right")
    for g in result["groups"]:
        layers.add_row(
            g["label"], _ms(g["inprocess"]["score_ms"]["p50"]),
            _ms(g["inprocess"]["service_ms"]["p50"]), _ms(g["http_c1"]["latency_ms"]["p50"]),
            _ms(g["http"]["latency_ms"]["p50"]), _ms(g["bm25s"]["latency_ms"]["p50"]),
            _hit(g["http_c1"]["hit_at_k"]), _hit(g["bm25s"]["hit_at_k"]),
        )  # fmt: skip
    console.print()
    console.print(layers)
    console.print(
        "SQL score only: bm25.score inside a unit_of_work with the agent's permissions. "
        "Service: selection.select plus its transaction and commit, no HTTP/auth/JSON. "
        "hit@5: the query's target tool is among those returned (toolsift also returns "
        "1-2 core tools)."
    )

    base = Table(
        title=f"bm25s {result.get('bm25s_version', '?')} in-process, single thread "
        f"(name + description, top-{K}, hidden tools masked)",
        title_justify="left",
    )
    for column in (
        "catalog",
        "selects/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "toolsift/bm25s selects/s",
        "p50 HTTP loaded / bm25s",
        "p50 HTTP 1 client / bm25s",
        "p50 SQL / bm25s",
    ):
        base.add_column(column, justify="left" if column == "catalog" else "right")
    for g in result["groups"]:
        b, r = g["bm25s"], g["ratios"]
        base.add_row(
            g["label"], _rate(b["selects_per_second"]), _ms(b["latency_ms"]["p50"]),
            _ms(b["latency_ms"]["p95"]), _ms(b["latency_ms"]["p99"]),
            _ratio(r["throughput_toolsift_over_bm25s"]), _ratio(r["p50_http_loaded_over_bm25s"]),
            _ratio(r["p50_http_c1_over_bm25s"]), _ratio(r["p50_sql_score_over_bm25s"]),
        )  # fmt: skip
    console.print()
    console.print(base)

    verdicts = Table(title="Targets", title_justify="left")
    for column in ("target", "run", "measured", "result"):
        verdicts.add_column(column)
    for t in result["targets"]:
        value = _ms(t["value"]) + " ms" if "p50" in t["target"] else _rate(t["value"]) + " /s"
        verdicts.add_row(
            t["target"], t["run"], value, "[green]PASS[/]" if t["passed"] else "[red]FAIL[/]"
        )
    console.print()
    console.print(verdicts)
    for g in result["groups"]:
        # Every run, the baseline server's included: one that failed measured nothing, and
        # the first error is what tells why (a baseline that cannot serve this schema).
        for r in g["runs"]:
            for name in ("http", "http_c1"):
                if r[name]["errors"]:
                    console.print(
                        f"[red]{g['label']}, {r['server']} {r['mode']}, {name}:"
                        f" {r[name]['errors']} errors[/], first: {r[name]['first_error']}"
                    )
        if "explain" in g:
            console.print(
                f"\n[bold]EXPLAIN (ANALYZE, BUFFERS)[/] {g['label']}: {g['explain']['query']!r}"
            )
            console.out("\n".join(g["explain"]["plan"]), highlight=False)
    console.print(f"\nwhole run: {result['seconds']:.0f} s")


def _runs_table(
    result: dict[str, Any], runs: list[tuple[dict[str, Any], dict[str, Any]]], console: Console
) -> None:
    """Every server and mode measured, interleaved in this run; ratios against the baseline."""
    o = result["options"]
    baseline = result.get("baseline")
    title = f"POST /v1/select by mode (k={K}, budget {BUDGET_TOKENS})"
    if baseline:
        title += f"; baseline = {baseline['ref']} ({baseline['commit'][:10]}), same run"
    table = Table(title=title, title_justify="left")
    for column in (
        "catalog",
        "server",
        "mode",
        f"selects/s ({o['concurrency']} clients)",
        f"p50 ms ({o['concurrency']})",
        "p50 ms (1 client)",
        "p95 ms (1 client)",
        "errors",
        "CPU ms/select: api",
        "postgres",
        "throughput vs baseline",
        "p50 (1 client) vs baseline",
    ):
        table.add_column(
            column, justify="left" if column in ("catalog", "server", "mode") else "right"
        )
    index = {(g["key"], r["server"], r["mode"]): r for g, r in runs}
    for g, r in runs:
        h, c1 = r["http"], r["http_c1"]
        base = index.get((g["key"], "baseline", r["mode"]))
        speedup = slower = None
        if base is not None and r["server"] != "baseline":
            if base["http"]["selects_per_second"]:
                speedup = h["selects_per_second"] / base["http"]["selects_per_second"]
            if c1["latency_ms"]["p50"]:
                slower = base["http_c1"]["latency_ms"]["p50"] / c1["latency_ms"]["p50"]
        cpu = h["cpu_ms_per_select"]
        table.add_row(
            g["label"], r["server"], r["mode"], _rate(h["selects_per_second"]),
            _ms(h["latency_ms"]["p50"]), _ms(c1["latency_ms"]["p50"]),
            _ms(c1["latency_ms"]["p95"]), str(h["errors"] + c1["errors"]),
            _ms(cpu.get("api")), _ms(cpu.get("postgres")),
            _ratio(speedup), _ratio(slower),
        )  # fmt: skip
    console.print()
    console.print(table)
    console.print(
        "vs baseline: throughput current/baseline, and p50 baseline/current (both > 1 when "
        "the current code is faster). Dense and hybrid embed the query in the API process, "
        "cached by text; the queries repeat, so after their first pass they are cache hits."
    )
    for g in result["groups"]:
        if "embed_ms" in g:
            e = g["embed_ms"]
            console.print(
                f"{g['label']}: one query embedded uncached (ONNX, in-process, after the HTTP "
                f"runs): p50 {_ms(e['p50'])} ms, p95 {_ms(e['p95'])} ms"
            )
