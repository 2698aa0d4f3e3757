"""What an agent does, from the shell: select (`toolsift eval` is in toolsift-tooling)."""

from __future__ import annotations

import time
from typing import Annotated

import httpx
import typer
from rich.table import Table

from ..kit.commands import (
    fail,
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


def _error_message(response: httpx.Response) -> str:
    """The API's own message (and the field it names), not its JSON body."""
    try:
        error = response.json()["error"]
        message = str(error["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:300] or response.reason_phrase
    field = error.get("field")
    return f"{field}: {message}" if field and field not in message else message
