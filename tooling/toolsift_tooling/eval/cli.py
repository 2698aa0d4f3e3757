"""`toolsift eval`: the command, mounted on the main CLI by `toolsift_tooling.register`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.markdown import Markdown

from toolsift.cli.base import console
from toolsift.config import get_settings
from toolsift.kit.commands import err, fail, unwritable


def _csv(value: str, what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise typer.BadParameter(f"give at least one {what}")
    return items


def _settings(value: str | None) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        settings = json.loads(value)
    except json.JSONDecodeError as error:
        raise typer.BadParameter(f"not JSON: {error}", param_hint="--tenant-settings") from None
    if not isinstance(settings, dict):
        raise typer.BadParameter("give a JSON object", param_hint="--tenant-settings")
    return settings


def eval_command(
    dataset_dir: Annotated[
        Path, typer.Argument(help="A folder with tools.jsonl and queries.jsonl.")
    ],
    modes: Annotated[
        str, typer.Option(help="Select modes, comma-separated.")
    ] = "bm25,dense,hybrid",
    k: Annotated[
        str,
        typer.Option(
            "--k",
            help="Cut-offs of recall@k, comma-separated (selects ask for at least 10 ranks,"
            " for nDCG@10).",
        ),
    ] = "1,3,5,10",
    out: Annotated[
        Path | None, typer.Option(help="Output folder (default: eval-results/<dataset>).")
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            help="A running server (default: an embedded stack of its own). With"
            " TOOLSIFT_OPERATOR_KEY a tenant is created for the run and deleted after it;"
            " with an admin key the dataset stays in that tenant."
        ),
    ] = None,
    admin_key: Annotated[
        str | None,
        typer.Option(
            envvar="TOOLSIFT_ADMIN_KEY",
            help="With --url: admin key of an empty tenant (wins over TOOLSIFT_OPERATOR_KEY);"
            " the run's agent key is revoked at the end.",
        ),
    ] = None,
    baselines: Annotated[
        str, typer.Option(help="In-process baselines, comma-separated, or 'none'.")
    ] = "baseline_bm25s,baseline_dense",
    half: Annotated[
        str, typer.Option(help="Which queries: 'check' (the half tuning never sees), tune, all.")
    ] = "check",
    queries: Annotated[
        int | None,
        typer.Option(min=1, help="Evaluate a seeded sample of this many queries (of --half)."),
    ] = None,
    warm: Annotated[
        bool,
        typer.Option(
            help="First replay the other half as usage (a select, then a reported call of"
            " each relevant tool), wait for the worker to learn it, then measure --half."
        ),
    ] = False,
    embedding_model: Annotated[
        str | None,
        typer.Option(
            help="The local model the stack of its own embeds with, and baseline_dense's"
            " (default: TOOLSIFT_EMBEDDING_ONNX_MODEL's)."
        ),
    ] = None,
    tenant_settings: Annotated[
        str | None,
        typer.Option(
            help="Settings (JSON, as PATCH /admin/v1/tenant merges them) the tenant gets before"
            ' its tools, e.g. \'{"text_search": "german"}\' or'
            ' \'{"fusion": {"dense_weight": 0.5}}\'; kept in results.json.'
        ),
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="Selects in flight.")] = 4,
    embed_timeout: Annotated[
        float,
        typer.Option(min=1, help="Give up after this many seconds without embedding progress."),
    ] = 300.0,
) -> None:
    """Retrieval quality of the served API on a labelled dataset, beside in-process baselines:
    recall@k, nDCG@10, MRR, tokens and latency; writes results.json, a table and a chart."""
    from . import dataset as eval_dataset
    from .client import ApiError
    from .report import write
    from .runner import Options, check, evaluate

    try:
        ks = sorted({int(v) for v in _csv(k, "k")})
    except ValueError:
        raise typer.BadParameter(f"--k must be integers, got {k!r}") from None
    if ks[0] < 1 or ks[-1] > 50:
        raise typer.BadParameter("--k values must be between 1 and 50")
    # The report writes its own queries.jsonl: never into the dataset it reads.
    if out is not None and out.resolve() == dataset_dir.resolve():
        raise typer.BadParameter("--out must not be the dataset's folder (it would be overwritten)")
    if half not in (*eval_dataset.HALVES, "all"):
        raise typer.BadParameter(
            f"{half!r}: use one of {', '.join(eval_dataset.HALVES)} or all", param_hint="--half"
        )
    if warm and half == "all":
        raise typer.BadParameter(
            "--warm replays the half not measured: use --half check or --half tune",
            param_hint="--warm",
        )
    chosen = [] if baselines.strip() == "none" else _csv(baselines, "baseline")
    given_settings = _settings(tenant_settings)
    options = Options(
        modes=list(dict.fromkeys(_csv(modes, "mode"))),  # a mode named twice runs once
        ks=ks,
        baselines=chosen,
        url=url,
        admin_key=admin_key,
        operator_key=get_settings().operator_key,
        concurrency=concurrency,
        embed_timeout=embed_timeout,
        embedding_model=embedding_model,
        tenant_settings=given_settings,
    )
    try:
        check(options)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    try:
        data = eval_dataset.load(dataset_dir)
    except eval_dataset.NoQueries as skipped:
        console.print(f"[yellow]skipped:[/yellow] {skipped}")
        return
    except eval_dataset.DatasetError as error:
        fail(str(error))
    for repair in data.repairs:
        err.print(f"[yellow]warning:[/yellow] {repair} (not valid JSON Schema)", highlight=False)
    if warm:
        other = next(h for h in eval_dataset.HALVES if h != half)
        options = dataclasses.replace(options, warm=data.half(other))
    # The half first: a sample is then of the half's queries.
    data = data.half(half).sample(queries)
    if not data.queries:
        fail(f"{data.name}: no queries in the {half} half (--half all measures every query)")
    # Found now, not after an hour of selects.
    target = out or Path("eval-results") / data.name
    if problem := unwritable(target, folder=True):
        raise typer.BadParameter(problem, param_hint="--out")
    console.print(f"{data.name}: {len(data.tools)} tools, {len(data.queries)} queries ({half})")
    try:
        evaluation = evaluate(data, options, console)
    except httpx.HTTPError as error:
        fail(f"{url}: {error}" if url else str(error))
    except (ApiError, ValueError, RuntimeError) as error:
        fail(str(error))
    try:
        paths = write(evaluation, ks, target)
    except OSError as error:
        fail(f"--out {target}: {error}")
    console.print(Markdown(paths[1].read_text()))
    console.print("written: " + ", ".join(str(p) for p in paths))
