"""What an agent does, from the shell: select, and evaluate on a dataset."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.markdown import Markdown
from rich.table import Table

from ..config import get_settings
from ..kit.commands import (
    err,
    fail,
    unwritable,
)
from .base import app, console


@app.command("select")
def select_command(
    query: Annotated[str, typer.Argument(help="The user's message.")],
    key: Annotated[str, typer.Option(envvar="TOOLSIFT_API_KEY", help="An agent key.")],
    url: Annotated[
        str, typer.Option(envvar="TOOLSIFT_URL", help="API base URL.")
    ] = "http://127.0.0.1:8000",
    role: Annotated[list[str] | None, typer.Option(help="Role to act as (repeat).")] = None,
    k: Annotated[int, typer.Option(help="Ranked tools to add.")] = 5,
    budget: Annotated[int, typer.Option(help="Token budget.")] = 4000,
    plan: Annotated[str, typer.Option(help="Task state: the plan in words.")] = "",
    output_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="anthropic, openai (Chat Completions), openai_responses, mcp or"
            " anthropic_tool_reference.",
        ),
    ] = "anthropic",
    mode: Annotated[str, typer.Option(help="bm25, dense or hybrid.")] = "hybrid",
    debug: Annotated[bool, typer.Option(help="Show scores of the candidates.")] = False,
    raw: Annotated[bool, typer.Option(help="Print the JSON response.")] = False,
) -> None:
    """Select tools for one turn through the API, as an agent would."""
    body = {
        "messages": [{"role": "user", "content": query}],
        "task": {"plan": plan},
        "k": k,
        "budget_tokens": budget,
        "mode": mode,
        "format": output_format,
        "debug": debug,
    }
    if role:
        body["roles"] = role
    started = time.perf_counter()
    try:
        response = httpx.post(
            f"{url.rstrip('/')}/v1/select",
            json=body,
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
    except httpx.HTTPError as error:
        fail(f"cannot reach {url}: {error}")
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        fail(f"HTTP {response.status_code}: {_error_message(response)}")
    data = response.json()
    if raw:
        console.print_json(data=data)
        return
    table = Table(
        title=f"{len(data['tools'])} tools, {data['tokens']} tokens, {data['mode']},"
        f" {elapsed:.1f} ms"
    )
    table.add_column("tool")
    # A tool reference carries only the name (`anthropic_tool_reference`).
    described = output_format != "anthropic_tool_reference"
    if described:
        table.add_column("description")
    for definition in data["tools"]:
        inner = definition.get("function", definition)
        name = inner.get("name") or inner.get("tool_name", "")
        row = [name, inner.get("description", "")] if described else [name]
        table.add_row(*row)
    console.print(table)
    # What a tool call is reported against (POST /v1/tool-calls): on a line of its own, whole.
    console.print(f"selection {data['selection_id']}", highlight=False, soft_wrap=True)
    if debug:
        scores = Table(title="candidates")
        for column in ("rank", "tool", "score", "matched", "outcome"):
            scores.add_column(column)
        for c in data.get("candidates", []):
            scores.add_row(
                str(c["rank"]),
                c["name"],
                f"{c['score']:.3f}",
                " ".join(c["matched_terms"]),
                c["reason"],
            )
        console.print(scores)


def _csv(value: str, what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise typer.BadParameter(f"give at least one {what}")
    return items


@app.command("eval")
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
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="Selects in flight.")] = 4,
    embed_timeout: Annotated[
        float,
        typer.Option(min=1, help="Give up after this many seconds without embedding progress."),
    ] = 300.0,
) -> None:
    """Retrieval quality of the served API on a labelled dataset, beside in-process baselines:
    recall@k, nDCG@10, MRR, tokens and latency; writes results.json, a table and a chart."""
    from ..eval import dataset as eval_dataset
    from ..eval.client import ApiError
    from ..eval.report import write
    from ..eval.runner import Options, check, evaluate

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
    options = Options(
        modes=list(dict.fromkeys(_csv(modes, "mode"))),  # a mode named twice runs once
        ks=ks,
        baselines=chosen,
        url=url,
        admin_key=admin_key,
        operator_key=get_settings().operator_key,
        concurrency=concurrency,
        embed_timeout=embed_timeout,
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


def _error_message(response: httpx.Response) -> str:
    """The API's own message (and the field it names), not its JSON body."""
    try:
        error = response.json()["error"]
        message = str(error["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:300] or response.reason_phrase
    field = error.get("field")
    return f"{field}: {message}" if field and field not in message else message
