"""`toolsift bench ...`: mounted by the main CLI with `app.add_typer(bench_app, name="bench")`."""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from toolsift.embedding import local
from toolsift.kit.commands import unwritable

from .report import render
from .run import MODES, REPO, Options, benchmark, resolve_commit
from .synthetic import Sizes

app = typer.Typer(help="Benchmarks that print figures.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Benchmarks that print figures."""  # a callback keeps `select` a subcommand


def _check_json_path(path: Path | None) -> None:
    """Refuse a --json path that cannot be written before the run, not after its minutes."""
    if path is not None and (problem := unwritable(path)):
        raise typer.BadParameter(problem, param_hint="--json")


def _write_json(result: dict[str, Any], path: Path | None, console: Console) -> None:
    if path is not None:
        text = json.dumps(_strict(result), indent=2, default=str, allow_nan=False)
        path.write_text(text + "\n")
        console.print(f"figures written to {path}")


def _strict(value: Any) -> Any:
    """The figures with null for a figure nothing was measured for (a NaN: no writes in a
    run without them): `NaN` is not JSON, and jq or a browser refuses the whole file."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _strict(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(item) for item in value]
    return value


def _exit_on_fail(passed: Iterable[bool]) -> None:
    """Exit 1 on any FAIL, once the figures are printed and written: a script or CI job that
    runs a benchmark sees the verdict without parsing the tables."""
    if not all(passed):
        raise typer.Exit(1)


def _failed_requests(result: dict[str, Any]) -> int:
    """Failed requests in every HTTP run, the runs no target judges included (a mode without
    targets, the baseline's server): a run whose requests failed measured nothing."""
    return sum(
        run[part]["errors"]
        for group in result["groups"]
        for run in group["runs"]
        for part in ("http", "http_c1")
    )


@app.command("select")
def select_command(
    seed: Annotated[int, typer.Option(help="Seed of the synthetic catalogs and queries.")] = 7,
    concurrency: Annotated[int, typer.Option(min=1, help="Concurrent HTTP clients.")] = 8,
    duration: Annotated[
        float, typer.Option(min=0.1, help="Measured seconds per catalog (after warm-up).")
    ] = 10.0,
    requests: Annotated[
        int, typer.Option(min=1, help="At most this many measured requests per catalog.")
    ] = 100_000,
    workers: Annotated[int, typer.Option(min=1, help="uvicorn worker processes.")] = 2,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write the figures to this JSON file.")
    ] = None,
    small_tenants: Annotated[int, typer.Option(min=0, help="Number of small tenants.")] = 98,
    small_min: Annotated[int, typer.Option(min=1, help="Fewest tools of a small tenant.")] = 20,
    small_max: Annotated[int, typer.Option(min=1, help="Most tools of a small tenant.")] = 50,
    big: Annotated[int, typer.Option(min=0, help="Tools of the big tenant.")] = 1000,
    huge: Annotated[int, typer.Option(min=0, help="Tools of the huge tenant.")] = 10_000,
    queries: Annotated[
        int, typer.Option(min=1, help="Queries for the big and huge tenants.")
    ] = 400,
    explain: Annotated[
        bool, typer.Option(help="Print EXPLAIN (ANALYZE, BUFFERS) of the scoring SQL.")
    ] = False,
    modes: Annotated[
        str,
        typer.Option(
            help="Select modes to measure over HTTP, comma separated (bm25, dense, hybrid); "
            "any but bm25 embeds every catalog first."
        ),
    ] = "bm25",
    baseline_ref: Annotated[
        str | None,
        typer.Option(
            help="Also serve this git revision's API on the same database and measure it "
            "interleaved with the current code (before/after ratios from one run)."
        ),
    ] = None,
    embedding_model: Annotated[
        str,
        typer.Option(help="The local model catalogs and queries are embedded with."),
    ] = local.DEFAULT_MODEL,
) -> None:
    """Load 100 synthetic tenants into a private embedded stack, then measure POST /v1/select
    over HTTP against bm25s in-process, and print PASS/FAIL against the latency targets.
    Exits 1 when a target fails."""
    _check_json_path(json_path)
    if small_min > small_max:
        raise typer.BadParameter("--small-min must not exceed --small-max")
    chosen = tuple(dict.fromkeys(m.strip() for m in modes.split(",") if m.strip()))
    unknown = [m for m in chosen if m not in MODES]
    if not chosen or unknown:
        raise typer.BadParameter(
            f"unknown mode(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(MODES)}",
            param_hint="--modes",
        )
    if embedding_model not in local.MODELS:
        raise typer.BadParameter(
            f"unknown model {embedding_model!r}; choose from {', '.join(local.MODELS)}",
            param_hint="--embedding-model",
        )
    if baseline_ref is not None:
        try:
            resolve_commit(baseline_ref)  # before minutes of setup, not after them
        except (subprocess.CalledProcessError, OSError):
            raise typer.BadParameter(
                f"{baseline_ref!r} is not a commit of the git repository at {REPO}",
                param_hint="--baseline-ref",
            ) from None
    console = Console()
    options = Options(
        seed=seed,
        concurrency=concurrency,
        duration=duration,
        max_requests=requests,
        workers=workers,
        sizes=Sizes(
            small_tenants=small_tenants,
            small_min=small_min,
            small_max=small_max,
            big=big,
            huge=huge,
            queries=queries,
        ),
        explain=explain,
        modes=chosen,
        baseline_ref=baseline_ref,
        embedding_model=embedding_model,
    )
    result = benchmark(options, log=lambda line: console.log(line))
    render(result, console)
    _write_json(result, json_path, console)
    _exit_on_fail([*(t["passed"] for t in result["targets"]), _failed_requests(result) == 0])


@app.command("embed")
def embed_command(
    tools: Annotated[
        int, typer.Option(min=10, help="Tools imported for the throughput run.")
    ] = 2000,
    rate: Annotated[float, typer.Option(min=0.1, help="Updates per second in the stream.")] = 50.0,
    duration: Annotated[float, typer.Option(min=1, help="Seconds of the update stream.")] = 30.0,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic catalog and updates.")] = 7,
    relay_interval: Annotated[
        float | None,
        typer.Option(min=0.05, help="Seconds between outbox relay runs (default: the setting)."),
    ] = None,
    stream_workers: Annotated[
        int,
        typer.Option(min=1, help="Worker processes serving the update stream (one core each)."),
    ] = 2,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write the figures to this JSON file.")
    ] = None,
) -> None:
    """Embedding throughput of one worker core, and freshness (write to dense-searchable)
    under a steady stream of updates, through the real outbox, broker and worker. Exits 1
    when a target fails."""
    from .embed import EmbedOptions, render_embed
    from .embed import benchmark as embed_benchmark

    _check_json_path(json_path)
    console = Console()
    options = EmbedOptions(
        tools=tools,
        rate=rate,
        duration=duration,
        seed=seed,
        relay_interval=relay_interval,
        stream_workers=stream_workers,
    )
    result = embed_benchmark(options, log=lambda line: console.log(line))
    render_embed(result, console)
    _write_json(result, json_path, console)
    _exit_on_fail(t["pass"] for t in result["targets"])


@app.command("load")
def load_command(
    clients: Annotated[int, typer.Option(min=1, help="Concurrent HTTP clients.")] = 50,
    duration: Annotated[float, typer.Option(min=1.0, help="Seconds of traffic.")] = 60.0,
    tenants: Annotated[
        int, typer.Option(min=1, help="Synthetic tenants (20-50 tools each).")
    ] = 100,
    write_share: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of requests that are admin writes.")
    ] = 0.1,
    fault: Annotated[
        str,
        typer.Option(help="none, postgres-restart, redis-restart or worker-kill (SIGKILL)."),
    ] = "none",
    fault_at: Annotated[
        float | None,
        typer.Option(min=0.0, help="Seconds into the run, before its end (default: a third)."),
    ] = None,
    outage: Annotated[
        float, typer.Option(min=0.0, help="Seconds the faulted service stays down.")
    ] = 2.0,
    workers: Annotated[int, typer.Option(min=1, help="uvicorn worker processes.")] = 2,
    seed: Annotated[int, typer.Option(help="Seed of the catalogs, queries and traffic.")] = 7,
    settle: Annotated[
        bool, typer.Option(help="Embed the catalogs before measuring (as a server that ran).")
    ] = True,
    drain_timeout: Annotated[
        float, typer.Option(min=1.0, help="Seconds the embedding backlog may take to drain.")
    ] = 900.0,
    rate: Annotated[
        float | None,
        typer.Option(
            min=0.1,
            help="Requests/s in all on a fixed schedule (open loop; latency counts from when "
            "a request was due). Default: closed loop, each client sends when answered.",
        ),
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write the figures to this JSON file.")
    ] = None,
) -> None:
    """Mixed traffic (selects across every tenant, admin writes) against the served API on a
    private embedded stack, optionally through a fault; prints throughput, p50/p95/p99, errors
    and PASS/FAIL per check. Exits 1 when a check fails."""
    from .loadrun import FAULTS, LoadOptions, render
    from .loadrun import benchmark as load_benchmark

    _check_json_path(json_path)
    if fault not in FAULTS:
        raise typer.BadParameter(f"must be one of {', '.join(FAULTS)}", param_hint="--fault")
    if fault != "none" and fault_at is not None and fault_at >= duration:
        raise typer.BadParameter(
            f"must be less than --duration ({duration:g} s): no traffic would meet the fault",
            param_hint="--fault-at",
        )
    console = Console()
    options = LoadOptions(
        clients=clients,
        duration=duration,
        tenants=tenants,
        write_share=write_share,
        fault=fault,
        fault_at=fault_at,
        outage=outage,
        workers=workers,
        seed=seed,
        settle=settle,
        drain_timeout=drain_timeout,
        rate=rate,
    )
    result = load_benchmark(options, log=lambda line: console.log(line))
    render(result, console)
    _write_json(result, json_path, console)
    _exit_on_fail(check["ok"] for check in result["checks"].values())
