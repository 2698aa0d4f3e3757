"""Tool-call feedback, reads of the `analytics` views, analyst logins, partition upkeep.

The views run with the caller's rights (security_invoker), so every read here is bounded by
the tenant's row-level security exactly as the base tables are.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any, Generic, TypeVar
from uuid import UUID

import psycopg
from pydantic import BaseModel
from sqlalchemy import TextClause, insert, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..auth.deps import Principal
from ..db import tenant_gone
from ..embedding import learning
from ..errors import NotFound, Unprocessable
from ..models import ToolCall
from ..security import audit
from . import schemas
from .schemas import ToolCallCreate, ToolCallRead

Row = TypeVar("Row", bound=BaseModel)

# The key that made the selection only: it may hold tools another key of the tenant may not
# see, and `selected` would confirm their names to it.
_SELECTION = text(
    "SELECT created_at, :tool = ANY (tool_names) AS selected FROM selection_logs"
    " WHERE tenant_id = :tenant_id AND id = :id AND key_id = :key_id"
)


@dataclass(frozen=True)
class View(Generic[Row]):
    """One `analytics` view: its row shape, order, and the column `since`/`until` filter."""

    name: str
    row: type[Row]
    order_by: str
    # A date column, or a timestamp column compared with the day's start; None: no filter.
    since_column: str | None
    summary: str

    def statement(self) -> TextClause:
        where = "TRUE"
        if self.since_column is not None:
            where = (
                f"(CAST(:since AS date) IS NULL OR {self.since_column} >= CAST(:since AS date))"
                f" AND (CAST(:until AS date) IS NULL OR {self.since_column} < CAST(:until AS date))"
            )
        return text(
            f"SELECT * FROM analytics.{self.name} WHERE {where}"  # noqa: S608 - names are the constants below
            f" ORDER BY {self.order_by} LIMIT :limit"
        )


VIEWS: dict[str, View[Any]] = {
    v.name: v
    for v in (
        View(
            "called_tool_recall",
            schemas.RecallRow,
            "day, mode",
            "day",
            "Share of the tools the model called that the select had offered, by day and mode.",
        ),
        View(
            "tokens_per_turn",
            schemas.TokensRow,
            "day",
            "day",
            "Tokens of the definitions sent against the whole allowed catalog, by day.",
        ),
        View(
            "latency_percentiles",
            schemas.LatencyRow,
            "day, mode",
            "day",
            "Select latency percentiles in milliseconds, by day and mode.",
        ),
        View(
            "zero_result_queries",
            schemas.ZeroResultRow,
            "selections DESC, last_seen DESC, query",
            "last_seen",
            "Queries that matched nothing (zero_result), hybrid ones none of whose words"
            " matched a tool (no_word_match), or that brought back core tools only.",
        ),
        View(
            "tools_never_selected",
            schemas.NeverSelectedRow,
            "name",
            None,
            "Live tools that no logged select has offered.",
        ),
        View(
            "tools_selected_never_called",
            schemas.NeverCalledRow,
            "selections DESC, name",
            None,
            "Live tools offered by selects but never called by the model.",
        ),
        View(
            "tool_usage_daily",
            schemas.ToolUsageRow,
            # Newest first: a limit cuts the oldest days, not the latest.
            "day DESC, selections DESC, tool_name",
            "day",
            "Per day and tool: times offered and times called.",
        ),
        View(
            "near_duplicate_tools",
            schemas.NearDuplicateRow,
            "greatest(coalesce(cosine_similarity, 0), name_similarity) DESC, name_a, name_b",
            None,
            "Pairs of tools so close (vectors or names) that they split scores.",
        ),
        View(
            "tool_version_drift",
            schemas.DriftRow,
            "changed_at DESC, name",
            "changed_at",
            "A tool's selection rate before and after each new version.",
        ),
    )
}
_STATEMENTS = {name: view.statement() for name, view in VIEWS.items()}
MAX_ROWS = 10_000
# Per tool over a period, summed here: callers that summed the daily rows of
# `tool_usage_daily` were cut off by MAX_ROWS on a busy tenant. The same counts as that view,
# read from its base tables: a range on the timestamps behind the view's `day` skips the months
# out of range and uses the (tenant_id, created_at) keys, where a filter on the computed day
# scans every month the tenant has. Open ends are infinities, so one plan serves both kinds.
_TOP_TOOLS = text(
    """
    SELECT tool_name, sum(selections)::bigint AS selections, sum(calls)::bigint AS calls
    FROM (
        SELECT picked.name AS tool_name, count(*) AS selections, 0 AS calls
        FROM selection_logs s CROSS JOIN LATERAL unnest(s.tool_names) AS picked(name)
        WHERE s.tenant_id = :tenant_id
          AND s.created_at >= coalesce(CAST(:since AS timestamptz), '-infinity')
          AND s.created_at < coalesce(CAST(:until AS timestamptz), 'infinity')
        GROUP BY picked.name
        UNION ALL
        SELECT c.tool_name, 0, count(*)
        FROM tool_calls c
        WHERE c.tenant_id = :tenant_id
          AND c.selection_created_at >= coalesce(CAST(:since AS timestamptz), '-infinity')
          AND c.selection_created_at < coalesce(CAST(:until AS timestamptz), 'infinity')
        GROUP BY c.tool_name
    ) u
    GROUP BY tool_name
    ORDER BY selections DESC, calls DESC, tool_name COLLATE "C"
    LIMIT :limit
    """
)
# The restrictive permission policies on tools read app.permissions: '*' shows an analyst its
# whole catalog (its tenant is pinned by the analyst policies whatever it sets).
ANALYST_OPTIONS = "-c app.permissions=*"


class AnalyticsService:
    def record_call(
        self, session: Session, principal: Principal, data: ToolCallCreate
    ) -> ToolCallRead:
        """Store a tool call against its selection; 404 for an unknown selection, or another
        key's or tenant's."""
        found = session.execute(
            _SELECTION,
            {
                "tenant_id": principal.tenant_id,
                "id": data.selection_id,
                "key_id": principal.key_id,
                "tool": data.tool,
            },
        ).first()
        if found is None:
            # Under RLS another tenant's selection is indistinguishable from none at all, and
            # another key's is answered the same.
            raise NotFound("no such selection", field="selection_id")
        call_id = uuid.uuid4()
        try:
            created_at = session.execute(
                insert(ToolCall)
                .values(
                    tenant_id=principal.tenant_id,
                    id=call_id,
                    selection_id=data.selection_id,
                    selection_created_at=found.created_at,
                    tool_name=data.tool,
                    allowed=data.allowed,
                    success=data.success,
                )
                .returning(ToolCall.created_at)
            ).scalar_one()
        except IntegrityError as error:
            # The selection was deleted since it was read (by retention, or with its tenant):
            # a 404, as for one that never was. A violation of the key to `tenants` goes on
            # to the app's handler, which answers it as the 401 of a deleted tenant.
            if isinstance(error.orig, psycopg.errors.ForeignKeyViolation) and not tenant_gone(
                error
            ):
                raise NotFound("no such selection", field="selection_id") from error
            raise
        # A call that went through teaches the ranking: one that was refused or failed says
        # nothing good of the tool for this query.
        learned = (
            data.allowed
            and data.success is not False
            and learning.record(
                session, principal.tenant_id, data.selection_id, found.created_at, data.tool
            )
        )
        return ToolCallRead(
            id=call_id,
            selection_id=data.selection_id,
            tool=data.tool,
            allowed=data.allowed,
            success=data.success,
            selected=bool(found.selected),
            learned=learned,
            created_at=created_at,
        )

    def rows(
        self,
        session: Session,
        view: str,
        *,
        since: date | None = None,
        until: date | None = None,
        limit: int = 1000,
    ) -> list[Any]:
        """Rows of one view, oldest day first; `until` is exclusive."""
        _check_period(since, until)
        spec = VIEWS[view]
        params = {"since": since, "until": until, "limit": min(limit, MAX_ROWS)}
        result = session.execute(_STATEMENTS[view], params).mappings()
        return [spec.row.model_validate(dict(r)) for r in result]

    def top_tools(
        self,
        session: Session,
        *,
        since: date | None = None,
        until: date | None = None,
        limit: int = 100,
    ) -> list[schemas.TopToolRow]:
        """Times offered and called per tool over [since, until) (UTC days), most offered
        first; ties by times called, then by name."""
        _check_period(since, until)
        params = {
            "tenant_id": session.info["tenant_id"],
            "since": _day_start(since),
            "until": _day_start(until),
            "limit": min(limit, MAX_ROWS),
        }
        result = session.execute(_TOP_TOOLS, params).mappings()
        return [schemas.TopToolRow.model_validate(dict(r)) for r in result]

    def analyst_login(self, session: Session) -> str | None:
        login: str | None = session.scalar(text("SELECT analytics.analyst_login()"))
        return login

    def create_analyst_login(self, session: Session) -> schemas.AnalystLogin:
        """Create, or give a new password to, the current tenant's analyst login.

        libpq computes the SCRAM-SHA-256 verifier on this side; the server stores it and never
        sees the password (so neither can its statement log).
        """
        password = secrets.token_urlsafe(24)
        tenant_id = session.info["tenant_id"]
        login = f"toolsift_analyst_{UUID(str(tenant_id)).hex}"
        existed = self.analyst_login(session) is not None
        raw = session.connection().connection.driver_connection
        assert raw is not None
        verifier = raw.pgconn.encrypt_password(password.encode(), login.encode(), b"scram-sha-256")
        created = session.scalar(
            text("SELECT analytics.set_analyst_login(:verifier)"), {"verifier": verifier.decode()}
        )
        assert created == login
        # A database credential that reads the tenant's queries: in the audit log, like a key.
        audit.record(
            session,
            table="analyst_login",
            key={"login": login},
            action="update" if existed else "insert",
            changed=["password"] if existed else ["login", "password"],
            after={"login": login},
        )
        database = session.scalar(text("SELECT current_database()"))
        return schemas.AnalystLogin(
            login=login,
            password=password,
            database=str(database),
            options=ANALYST_OPTIONS,
            views=sorted(VIEWS),
        )

    def drop_analyst_login(self, session: Session) -> None:
        login = self.analyst_login(session)
        if not session.scalar(text("SELECT analytics.drop_analyst_login()")):
            raise NotFound("this tenant has no analyst login")
        audit.record(
            session, table="analyst_login", key={"login": login}, action="delete", changed=[]
        )

    def maintain_partitions(
        self, session: Session, *, months_ahead: int, default_retention_days: int
    ) -> schemas.MaintenanceResult:
        """Create the coming months' partitions, apply each tenant's retention (to its logs and
        its learned queries), drop old months."""
        row = session.execute(
            text("SELECT * FROM analytics.maintain_partitions(:ahead, :days)"),
            {"ahead": months_ahead, "days": default_retention_days},
        ).one()
        return schemas.MaintenanceResult(
            created=list(row.created),
            dropped=list(row.dropped),
            deleted=int(row.deleted),
            forgotten=int(row.forgotten),
        )


def _check_period(since: date | None, until: date | None) -> None:
    if since is not None and until is not None and until <= since:
        # An empty answer would look like a quiet period.
        raise Unprocessable(f"until ({until}) must be after since ({since})", field="until")


def _day_start(day: date | None) -> datetime | None:
    """The start of a UTC day, the bound of the views' `day` on the logs' timestamps."""
    return None if day is None else datetime.combine(day, time(), UTC)


analytics = AnalyticsService()
