"""`toolsift report`: the analytics views of one tenant as rich tables."""

from __future__ import annotations

from datetime import date
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy.orm import Session

from .service import analytics as analytics_service

TOP = 15


def _table(title: str, columns: list[str], rows: list[list[Any]], *, empty: str) -> Table:
    table = Table(title=title, title_justify="left", caption=None if rows else empty)
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 0 else "right")
    for row in rows:
        table.add_row(*(_cell(value) for value in row))
    return table


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def render(
    console: Console, session: Session, *, since: date | None, until: date | None = None
) -> None:
    """Print every view of the session's tenant; day-based views are limited to the range."""

    def rows(view: str, limit: int = 1000) -> list[Any]:
        return analytics_service.rows(session, view, since=since, until=until, limit=limit)

    recall = rows("called_tool_recall")
    console.print(
        _table(
            "Recall of the called tool",
            ["day", "mode", "calls", "offered", "recall"],
            [[r.day, r.mode, r.calls, r.hits, _share(r.recall)] for r in recall],
            empty="no tool calls reported (POST /v1/tool-calls)",
        )
    )
    tokens = rows("tokens_per_turn")
    console.print(
        _table(
            "Tokens per turn",
            ["day", "selects", "avg sent", "avg catalog", "saved"],
            [
                [r.day, r.selections, r.avg_tokens, r.avg_catalog_tokens, _share(r.saved_share)]
                for r in tokens
            ],
            empty="no selects",
        )
    )
    latency = rows("latency_percentiles")
    console.print(
        _table(
            "Select latency (ms)",
            ["day", "mode", "selects", "p50", "p95", "p99", "max"],
            [
                [r.day, r.mode, r.selections, r.p50_ms, r.p95_ms, r.p99_ms, r.max_ms]
                for r in latency
            ],
            empty="no selects",
        )
    )
    top = analytics_service.top_tools(session, since=since, until=until, limit=TOP)
    console.print(
        _table(
            f"Top tools (first {TOP})",
            ["tool", "offered", "called"],
            [[r.tool_name, r.selections, r.calls] for r in top],
            empty="no selects",
        )
    )
    console.print(
        _table(
            "Queries with no result, or core tools only",
            ["query", "kind", "selects", "last seen"],
            [
                [r.query, r.kind, r.selections, r.last_seen.strftime("%Y-%m-%d %H:%M")]
                for r in rows("zero_result_queries", limit=TOP)
            ],
            empty="none",
        )
    )
    console.print(
        _table(
            "Near-duplicate tools",
            ["tool", "tool", "cosine", "name similarity"],
            [
                [r.name_a, r.name_b, r.cosine_similarity, r.name_similarity]
                for r in rows("near_duplicate_tools", limit=TOP)
            ],
            empty="none",
        )
    )
    console.print(
        _table(
            "Tools never selected",
            ["tool", "core", "in the catalog since"],
            [[r.name, r.core, r.created_at.date()] for r in rows("tools_never_selected")],
            empty="none",
        )
    )
    console.print(
        _table(
            "Tools selected but never called",
            ["tool", "core", "selects", "last selected"],
            [
                [r.name, r.core, r.selections, r.last_selected.date()]
                for r in rows("tools_selected_never_called")
            ],
            empty="none",
        )
    )
    console.print(
        _table(
            "Selection rate around new versions",
            ["tool", "version", "changed", "description", "before", "after", "change"],
            [
                [
                    r.name,
                    r.version,
                    r.changed_at.strftime("%Y-%m-%d %H:%M"),
                    "changed" if r.description_changed else "same",
                    _share(r.rate_before),
                    _share(r.rate_after),
                    "-" if r.rate_change is None else f"{100 * r.rate_change:+.1f} pts",
                ]
                for r in rows("tool_version_drift")
            ],
            empty="no tool has a second version",
        )
    )
