"""The outbox and the embed job, in-process against the real database and the real model."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from uuid import UUID

import psycopg
import pytest
import sqlalchemy.exc
from sqlalchemy import text

from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.embedding import service
from toolsift.embedding.base import EmbeddingBackend
from toolsift.embedding.onnx import OnnxBackend
from toolsift.errors import NotFound
from toolsift.tenants.schemas import TenantCreate
from toolsift.tenants.service import tenant as tenant_service
from toolsift.tools.schemas import ToolCreate, ToolUpdate
from toolsift.tools.service import tool as tool_service

from ..fixtures.embedding import RefusesPoison, republish_and_run
from ..fixtures.factories import PEPPER

OwnerConn = psycopg.Connection[tuple[object, ...]]


@pytest.fixture(scope="module")
def model() -> OnnxBackend:
    return OnnxBackend()


def _tenant(database: Database, name: str = "acme") -> UUID:
    with database.unit_of_work(None) as session:
        return tenant_service.create(session, TenantCreate(name=name), pepper=PEPPER).tenant.id


def _upsert(database: Database, tenant_id: UUID, *tools: ToolCreate) -> None:
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        tool_service.upsert(session, tenant_id, list(tools))


def _jobs(owner_conn: OwnerConn, tenant_id: UUID) -> list[tuple[object, ...]]:
    return owner_conn.execute(
        "SELECT o.kind, t.name, o.version FROM outbox o JOIN tools t"
        " ON t.tenant_id = o.tenant_id AND t.id = o.tool_id"
        " WHERE o.tenant_id = %s ORDER BY t.name, o.version",
        (tenant_id,),
    ).fetchall()


def _vectors(owner_conn: OwnerConn, tenant_id: UUID) -> dict[str, tuple[object, ...]]:
    rows = owner_conn.execute(
        "SELECT t.name, e.model, e.version, e.dimension, e.required_permission_id"
        " FROM tool_embeddings e JOIN tools t ON t.tenant_id = e.tenant_id AND t.id = e.tool_id"
        " WHERE e.tenant_id = %s",
        (tenant_id,),
    ).fetchall()
    return {str(r[0]): r[1:] for r in rows}


def _run_all(database: Database, backend: EmbeddingBackend) -> int:
    """What relay + worker do, synchronously: publish, then run the published batches."""
    published: list[tuple[UUID, list[UUID]]] = []
    service.relay(
        database, lambda t, jobs: published.append((t, jobs)), lease_seconds=60, batch_tools=2
    )
    return sum(service.embed_jobs(database, backend, t, jobs).embedded for t, jobs in published)


class TestJobsCommitWithTheWrite:
    def test_created_and_changed_tools_get_a_job_unchanged_ones_none(
        self, database: Database, owner_conn: OwnerConn
    ) -> None:
        tenant_id = _tenant(database)
        _upsert(database, tenant_id, ToolCreate(name="a", description="one"), ToolCreate(name="b"))
        _upsert(database, tenant_id, ToolCreate(name="a", description="two"), ToolCreate(name="b"))
        assert _jobs(owner_conn, tenant_id) == [
            ("embed", "a", 1),
            ("embed", "a", 2),
            ("embed", "b", 1),
        ]

    def test_a_rolled_back_write_leaves_no_job(
        self, database: Database, owner_conn: OwnerConn
    ) -> None:
        tenant_id = _tenant(database)

        def fail_after_the_write() -> None:
            with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
                tool_service.upsert(session, tenant_id, [ToolCreate(name="a")])
                raise RuntimeError("the request failed after the write")

        with pytest.raises(RuntimeError):
            fail_after_the_write()
        assert _jobs(owner_conn, tenant_id) == []


class TestRelay:
    def test_only_a_relay_transaction_sees_other_tenants_jobs(self, database: Database) -> None:
        a, b = _tenant(database, "acme"), _tenant(database, "globex")
        _upsert(database, a, ToolCreate(name="x"))
        _upsert(database, b, ToolCreate(name="y"))
        with database.unit_of_work(a, permissions=ALL_PERMISSIONS) as session:
            assert session.scalar(text("SELECT count(*) FROM outbox")) == 1
        with database.unit_of_work(None) as session:
            assert session.scalar(text("SELECT count(*) FROM outbox")) == 0
        published: list[tuple[UUID, int]] = []
        count = service.relay(
            database,
            lambda t, jobs: published.append((t, len(jobs))),
            lease_seconds=60,
            batch_tools=10,
        )
        assert count == 2
        assert sorted(published) == sorted([(a, 1), (b, 1)])

    def test_the_relay_can_neither_add_nor_remove_jobs(self, database: Database) -> None:
        a = _tenant(database)
        _upsert(database, a, ToolCreate(name="x"))
        with database.unit_of_work(None) as session:
            session.execute(text("SELECT set_config('app.relay', 'on', true)"))
            assert session.execute(text("DELETE FROM outbox")).rowcount == 0  # type: ignore[attr-defined]

        def insert_as_relay() -> None:
            with database.unit_of_work(None) as session:
                session.execute(text("SELECT set_config('app.relay', 'on', true)"))
                session.execute(
                    text(
                        "INSERT INTO outbox (tenant_id, id, kind, attempts)"
                        " VALUES (:t, :i, 'embed', 0)"
                    ),
                    {"t": a, "i": uuid.uuid4()},
                )

        with pytest.raises(sqlalchemy.exc.ProgrammingError, match="row-level security"):
            insert_as_relay()

    def test_published_jobs_are_published_again_only_after_their_lease(
        self, database: Database
    ) -> None:
        a = _tenant(database)
        _upsert(database, a, ToolCreate(name="x"), ToolCreate(name="y"), ToolCreate(name="z"))
        calls: list[list[UUID]] = []
        assert (
            service.relay(database, lambda t, j: calls.append(j), lease_seconds=60, batch_tools=2)
            == 3
        )
        assert [len(c) for c in calls] == [2, 1]
        assert (
            service.relay(database, lambda t, j: calls.append(j), lease_seconds=60, batch_tools=2)
            == 0
        )
        # A lost message: after the lease the same jobs go out again.
        assert (
            service.relay(database, lambda t, j: calls.append(j), lease_seconds=0, batch_tools=2)
            == 3
        )

    def test_a_small_claim_goes_out_in_smaller_tasks_a_backlog_in_full_ones(
        self, database: Database
    ) -> None:
        a = _tenant(database)
        _upsert(database, a, *(ToolCreate(name=f"t{i}") for i in range(50)))
        calls: list[list[UUID]] = []
        assert (
            service.relay(database, lambda t, j: calls.append(j), lease_seconds=60, batch_tools=64)
            == 50
        )
        # A stream's claim: about four tasks, so the first vectors land after a quarter.
        assert [len(c) for c in calls] == [13, 13, 12, 12]
        assert len({j for c in calls for j in c}) == 50
        _upsert(database, a, *(ToolCreate(name=f"u{i}") for i in range(300)))
        calls.clear()
        service.relay(database, lambda t, j: calls.append(j), lease_seconds=60, batch_tools=64)
        assert [len(c) for c in calls] == [60] * 5

    def test_task_sizes(self) -> None:
        assert service.task_sizes(0, 64) == []
        assert service.task_sizes(1, 64) == [1]
        assert service.task_sizes(8, 64) == [8]  # too few to split
        assert service.task_sizes(12, 64) == [6, 6]
        assert service.task_sizes(2000, 64) == [63] * 16 + [62] * 16
        assert service.task_sizes(5, 1) == [1] * 5
        for count in range(1, 300):
            sizes = service.task_sizes(count, 32)
            assert sum(sizes) == count
            assert max(sizes) <= 32
            assert max(sizes) - min(sizes) <= 1

    def test_a_broker_failure_keeps_the_jobs_due(self, database: Database) -> None:
        a = _tenant(database)
        _upsert(database, a, ToolCreate(name="x"))

        def broken(_tenant: UUID, _jobs: list[UUID]) -> None:
            raise ConnectionError("broker down")

        with pytest.raises(ConnectionError):
            service.relay(database, broken, lease_seconds=60, batch_tools=10)
        assert service.relay(database, lambda t, j: None, lease_seconds=60, batch_tools=10) == 1


class TestEmbedJobs:
    def test_every_tool_gets_its_current_version_once_and_jobs_are_done(
        self, database: Database, owner_conn: OwnerConn, model: OnnxBackend
    ) -> None:
        tenant_id = _tenant(database)
        _upsert(database, tenant_id, ToolCreate(name="a", description="one"), ToolCreate(name="b"))
        _upsert(database, tenant_id, ToolCreate(name="a", description="two"), ToolCreate(name="b"))
        assert _run_all(database, model) == 2
        assert _vectors(owner_conn, tenant_id) == {
            "a": (model.model, 2, 384, None),
            "b": (model.model, 1, 384, None),
        }
        assert _jobs(owner_conn, tenant_id) == []
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            status = service.status(session, tenant_id)
        assert status == service.EmbeddingStatus(model.model, 2, 2, 0, 0, 0)

    def test_repeating_a_job_changes_nothing(
        self, database: Database, owner_conn: OwnerConn, model: OnnxBackend
    ) -> None:
        tenant_id = _tenant(database)
        _upsert(database, tenant_id, ToolCreate(name="a"))
        jobs = [
            r[0]
            for r in owner_conn.execute("SELECT id FROM outbox WHERE tenant_id = %s", (tenant_id,))
        ]
        first = service.embed_jobs(database, model, tenant_id, jobs)  # type: ignore[arg-type]
        again = service.embed_jobs(database, model, tenant_id, jobs)  # type: ignore[arg-type]
        assert (first.embedded, again.embedded, again.jobs) == (1, 0, 1)

    def test_an_update_during_the_embed_wins(
        self, database: Database, owner_conn: OwnerConn, model: OnnxBackend
    ) -> None:
        """The model is computing version 1 while version 2 commits: 1 is never stored."""
        tenant_id = _tenant(database)
        _upsert(database, tenant_id, ToolCreate(name="a", description="old words"))

        class UpdatedMidway:
            def __init__(self) -> None:
                self.model, self.dimension = model.model, model.dimension

            def embed(self, texts: Sequence[str]) -> list[list[float]]:
                if any("old words" in t for t in texts):
                    _upsert(database, tenant_id, ToolCreate(name="a", description="new words"))
                return model.embed(texts)

        backend = UpdatedMidway()
        _run_all(database, backend)
        assert _vectors(owner_conn, tenant_id) == {}
        assert _jobs(owner_conn, tenant_id) == [("embed", "a", 2)]
        _run_all(database, backend)
        assert _vectors(owner_conn, tenant_id) == {"a": (model.model, 2, 384, None)}

    def test_vectors_follow_permission_at_once_and_leave_with_the_tool(
        self, database: Database, owner_conn: OwnerConn, model: OnnxBackend
    ) -> None:
        from toolsift.access.schemas import PermissionCreate
        from toolsift.access.service import access

        tenant_id = _tenant(database)
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            permission = access.create_permission(session, tenant_id, PermissionCreate(name="p"))
        _upsert(database, tenant_id, ToolCreate(name="a"))
        _run_all(database, model)
        _upsert(database, tenant_id, ToolCreate(name="a", required_permission="p"))
        # Not re-embedded yet, but the old vector is already restricted.
        assert _vectors(owner_conn, tenant_id) == {"a": (model.model, 1, 384, permission.id)}
        with database.unit_of_work(tenant_id) as session:
            assert session.scalar(text("SELECT count(*) FROM tool_embeddings")) == 0
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            (tool,) = tool_service.list_page(session, after=None, limit=10)[0]
            tool_service.delete(session, tool.id)
        assert _vectors(owner_conn, tenant_id) == {}

    def test_a_new_model_takes_over_only_when_it_covers_the_catalog(
        self, database: Database, owner_conn: OwnerConn, model: OnnxBackend
    ) -> None:
        tenant_id = _tenant(database)
        _upsert(database, tenant_id, ToolCreate(name="a"), ToolCreate(name="b"))
        _run_all(database, model)

        class NextModel:
            """The same network under another name: a distinct vector space to switch to."""

            model, dimension = "next-model", 384

            def embed(self, texts: Sequence[str]) -> list[list[float]]:
                return _reversed(model.embed(texts))

        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            assert service.reindex(session, tenant_id) == 2
        jobs = [
            r[0]
            for r in owner_conn.execute(
                "SELECT id FROM outbox WHERE tenant_id = %s ORDER BY created_at", (tenant_id,)
            )
        ]
        service.embed_jobs(database, NextModel(), tenant_id, jobs[:1])  # type: ignore[list-item]
        served = owner_conn.execute(
            "SELECT embedding_model FROM tenants WHERE id = %s", (tenant_id,)
        ).fetchone()
        assert served == (model.model,)
        service.embed_jobs(database, NextModel(), tenant_id, jobs[1:])  # type: ignore[list-item]
        served = owner_conn.execute(
            "SELECT embedding_model FROM tenants WHERE id = %s", (tenant_id,)
        ).fetchone()
        assert served == ("next-model",)
        assert {v[0] for v in _vectors(owner_conn, tenant_id).values()} == {"next-model"}

    def test_a_served_model_is_not_checked_against_the_catalog_again(
        self, database: Database, model: OnnxBackend
    ) -> None:
        # Every task ends with the switch check; once the tenant serves the task's model it
        # must not scan the tools (it did, in every task, at a cost growing with the catalog).
        tenant_id = _tenant(database)
        _upsert(database, tenant_id, *(ToolCreate(name=f"t{i}") for i in range(5)))
        _run_all(database, model)
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            (plan,) = session.execute(
                text("EXPLAIN (ANALYZE, FORMAT JSON) " + service._SWITCH.text),
                {"tenant_id": tenant_id, "model": model.model},
            ).one()
        scans = [n for n in _plan_nodes(plan[0]["Plan"]) if n.get("Relation Name") == "tools"]
        assert scans, "the statement no longer reads tools: update this test"
        assert all(n["Actual Loops"] == 0 for n in scans)

    def test_update_of_a_deleted_tool_is_refused_and_leaves_no_job(
        self, database: Database, owner_conn: OwnerConn
    ) -> None:
        tenant_id = _tenant(database)
        _upsert(database, tenant_id, ToolCreate(name="a"))
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            (tool,) = tool_service.list_page(session, after=None, limit=10)[0]
            tool_service.delete(session, tool.id)
        before = _jobs(owner_conn, tenant_id)
        with (
            pytest.raises(NotFound),
            database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session,
        ):
            tool_service.update(session, tool.id, ToolUpdate(description="x"))
        assert _jobs(owner_conn, tenant_id) == before


class Recording:
    """The real model, and the texts it was asked to embed."""

    def __init__(self, model: OnnxBackend) -> None:
        self.inner, self.model, self.dimension = model, model.model, model.dimension
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return self.inner.embed(texts)


def _stored(owner_conn: OwnerConn, tenant_id: UUID) -> dict[str, tuple[object, ...]]:
    """Each vector's version, bits and when it was computed."""
    rows = owner_conn.execute(
        "SELECT t.name, e.version, e.embedding::text, e.embedded_at FROM tool_embeddings e"
        " JOIN tools t ON t.tenant_id = e.tenant_id AND t.id = e.tool_id WHERE e.tenant_id = %s",
        (tenant_id,),
    ).fetchall()
    return {str(r[0]): r[1:] for r in rows}


class TestAnUnchangedText:
    """A new version whose embedded text is the same keeps its vector: not computed again."""

    def test_keeps_its_vector_and_a_changed_text_is_computed(
        self, database: Database, owner_conn: OwnerConn, model: OnnxBackend
    ) -> None:
        from toolsift.access.schemas import PermissionCreate
        from toolsift.access.service import access

        tenant_id = _tenant(database)
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            permission = access.create_permission(session, tenant_id, PermissionCreate(name="p"))
        schema = {"type": "object", "properties": {"order_id": {"type": "string"}}}
        a = ToolCreate(name="refund", description="Refund a payment", input_schema=schema)
        b = ToolCreate(name="track", description="Where is the parcel")
        _upsert(database, tenant_id, a, b)
        backend = Recording(model)
        _run_all(database, backend)
        before = _stored(owner_conn, tenant_id)
        backend.texts.clear()

        # A permission and a parameter's description: not what the model reads.
        described = {"type": "object", "properties": {"order_id": {"description": "The id"}}}
        a2 = a.model_copy(update={"required_permission": "p", "input_schema": described})
        b2 = b.model_copy(update={"description": "Where is the parcel now"})
        _upsert(database, tenant_id, a2, b2)
        _run_all(database, backend)

        assert backend.texts == ["track: Where is the parcel now"]
        after = _stored(owner_conn, tenant_id)
        assert after["refund"] == (2, *before["refund"][1:])  # the same bits, not recomputed
        assert after["track"][0] == 2
        assert after["track"][1:] != before["track"][1:]
        # The carried vector took the tool's new permission with it.
        assert _vectors(owner_conn, tenant_id)["refund"] == (model.model, 2, 384, permission.id)
        assert _jobs(owner_conn, tenant_id) == []
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            status = service.status(session, tenant_id)
        assert (status.embedded, status.stale, status.missing, status.pending_jobs) == (2, 0, 0, 0)

    def test_a_forced_reindex_and_a_vector_without_a_digest_are_computed(
        self, database: Database, owner_conn: OwnerConn, model: OnnxBackend
    ) -> None:
        tenant_id = _tenant(database)
        tool = ToolCreate(name="refund", description="Refund a payment")
        _upsert(database, tenant_id, tool)
        backend = Recording(model)
        _run_all(database, backend)
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            service.reindex(session, tenant_id, force=True)
        _run_all(database, backend)
        assert backend.texts == ["refund: Refund a payment"] * 2

        # A vector stored before its digest was kept (revision 0018) is computed again.
        owner_conn.execute(
            "UPDATE tool_embeddings SET text_hash = NULL WHERE tenant_id = %s", (tenant_id,)
        )
        _upsert(database, tenant_id, tool.model_copy(update={"core": True}))
        _run_all(database, backend)
        assert len(backend.texts) == 3
        assert _vectors(owner_conn, tenant_id)["refund"][1] == 2

    def test_a_vector_of_a_text_the_tool_no_longer_gives_is_computed_by_a_plain_reindex(
        self, database: Database, owner_conn: OwnerConn, model: OnnxBackend
    ) -> None:
        # As after an upgrade that changed `document_text`: the vector is of the current
        # version, but of another text.
        tenant_id = _tenant(database)
        _upsert(
            database,
            tenant_id,
            ToolCreate(name="refund", description="Refund a payment"),
            ToolCreate(name="track", description="Where is the parcel"),
        )
        backend = Recording(model)
        _run_all(database, backend)
        owner_conn.execute(
            "UPDATE tool_embeddings e SET text_hash = %s FROM tools t WHERE t.tenant_id = %s"
            " AND e.tenant_id = t.tenant_id AND e.tool_id = t.id AND t.name = 'refund'",
            (service.text_hash("refund. Refund a payment"), tenant_id),
        )
        backend.texts.clear()
        for _ in range(2):  # the second changes nothing
            with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
                service.reindex(session, tenant_id)
            _run_all(database, backend)
        assert backend.texts == ["refund: Refund a payment"]
        assert _jobs(owner_conn, tenant_id) == []
        assert _vectors(owner_conn, tenant_id)["refund"][1] == 1


def _reversed(vectors: list[list[float]]) -> list[list[float]]:
    return [list(reversed(v)) for v in vectors]


def _plan_nodes(node: dict[str, object]) -> list[dict[str, object]]:
    children = node.get("Plans", [])
    assert isinstance(children, list)
    return [node, *(n for child in children for n in _plan_nodes(child))]


class TakesAll(RefusesPoison):
    model = "old-model"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[0.0, 1.0, float(len(t)), 0.0] for t in texts]


def _served(owner_conn: OwnerConn, tenant_id: UUID) -> object:
    row = owner_conn.execute(
        "SELECT embedding_model FROM tenants WHERE id = %s", (tenant_id,)
    ).fetchone()
    assert row is not None
    return row[0]


def _refusals(owner_conn: OwnerConn, tenant_id: UUID) -> list[tuple[object, ...]]:
    return owner_conn.execute(
        "SELECT t.name, r.model, r.version FROM embedding_refusals r"
        " JOIN tools t ON t.tenant_id = r.tenant_id AND t.id = r.tool_id"
        " WHERE r.tenant_id = %s ORDER BY t.name, r.model",
        (tenant_id,),
    ).fetchall()


class TestARefusedText:
    def test_does_not_keep_its_batch_mates_from_their_vectors_and_is_dropped_at_last(
        self, database: Database, owner_conn: OwnerConn
    ) -> None:
        tenant_id = _tenant(database)
        tools = [ToolCreate(name=f"t{i}", description=f"tool {i}") for i in range(5)]
        _upsert(database, tenant_id, *tools, ToolCreate(name="bad", description="poison"))
        backend = RefusesPoison()
        republish_and_run(database, backend)
        assert sorted(_vectors(owner_conn, tenant_id)) == [f"t{i}" for i in range(5)]
        assert _jobs(owner_conn, tenant_id) == [("embed", "bad", 1)]  # kept for a later try
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            assert service.status(session, tenant_id).refused_jobs == 1
        for refusal in range(2, service.MAX_EMBED_REFUSALS + 1):
            # Publishes alone (a worker outage republishes a job many times) do not count.
            owner_conn.execute("UPDATE outbox SET attempts = attempts + 10")
            republish_and_run(database, backend)
            left = owner_conn.execute(
                "SELECT refusals FROM outbox WHERE tenant_id = %s", (tenant_id,)
            ).fetchall()
            assert left == ([] if refusal == service.MAX_EMBED_REFUSALS else [(refusal,)])
        assert "bad" not in _vectors(owner_conn, tenant_id)
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            status = service.status(session, tenant_id)
        assert (status.refused_jobs, status.refused_tools, status.missing) == (0, 1, 1)
        [refused] = status.refused
        assert (refused.name, refused.model, refused.version) == ("bad", "refusing-model", 1)
        assert "HTTP 400: input too long" in refused.reason

    def test_a_model_change_does_not_wait_for_a_text_the_new_model_refuses(
        self, database: Database, owner_conn: OwnerConn
    ) -> None:
        tenant_id = _tenant(database)
        _upsert(database, tenant_id, ToolCreate(name="ok", description="fine"))
        _upsert(database, tenant_id, ToolCreate(name="bad", description="poison"))
        republish_and_run(database, TakesAll())
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            service.reindex(session, tenant_id, force=True)
        for _ in range(service.MAX_EMBED_REFUSALS):
            assert _served(owner_conn, tenant_id) == "old-model"  # "bad" may yet be embedded
            republish_and_run(database, RefusesPoison())
        assert _served(owner_conn, tenant_id) == "refusing-model"
        assert _vectors(owner_conn, tenant_id) == {"ok": ("refusing-model", 1, 4, None)}
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            status = service.status(session, tenant_id)
        assert (status.missing, status.refused_tools, status.other_models) == (1, 1, {})
        # A new version is tried again, and its vector settles the refusal.
        _upsert(database, tenant_id, ToolCreate(name="bad", description="now harmless"))
        republish_and_run(database, RefusesPoison())
        assert _vectors(owner_conn, tenant_id)["bad"] == ("refusing-model", 2, 4, None)
        assert _refusals(owner_conn, tenant_id) == []

    def test_a_server_that_refuses_everything_never_replaces_a_working_model(
        self, database: Database, owner_conn: OwnerConn
    ) -> None:
        tenant_id = _tenant(database)
        _upsert(database, tenant_id, ToolCreate(name="a", description="poison one"))
        _upsert(database, tenant_id, ToolCreate(name="b", description="poison two"))
        republish_and_run(database, TakesAll())
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            service.reindex(session, tenant_id, force=True)
        for _ in range(service.MAX_EMBED_REFUSALS):
            republish_and_run(database, RefusesPoison())
        assert _served(owner_conn, tenant_id) == "old-model"
        assert {v[0] for v in _vectors(owner_conn, tenant_id).values()} == {"old-model"}
        assert [r[:2] for r in _refusals(owner_conn, tenant_id)] == [
            ("a", "refusing-model"),
            ("b", "refusing-model"),
        ]

    def test_refusals_count_tools_and_go_when_their_model_is_given_up(
        self, database: Database, owner_conn: OwnerConn
    ) -> None:
        tenant_id = _tenant(database)
        _upsert(database, tenant_id, ToolCreate(name="ok", description="fine"))
        _upsert(database, tenant_id, ToolCreate(name="a", description="poison"))

        class RefusesAll(RefusesPoison):
            model = "other-refusing-model"

            def embed(self, texts: Sequence[str]) -> list[list[float]]:
                return super().embed([f"poison {t}" for t in texts])

        # The first model serves at once, refusing "a"; a model change refuses both tools.
        for backend in (RefusesPoison(), RefusesAll()):
            with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
                service.reindex(session, tenant_id, force=True)
            for _ in range(service.MAX_EMBED_REFUSALS):
                republish_and_run(database, backend)
        assert _served(owner_conn, tenant_id) == "refusing-model"
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            status = service.status(session, tenant_id)
        assert status.refused_tools == 2  # tools, not (tool, model) pairs
        assert [(r.name, r.model) for r in status.refused] == [
            ("ok", "other-refusing-model"),
            ("a", "other-refusing-model"),
            ("a", "refusing-model"),
        ]
        # The change is given up: the served model runs again, and nothing will settle the
        # other model's refusal any more.
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            service.reindex(session, tenant_id, force=True)
        republish_and_run(database, RefusesPoison())
        assert _refusals(owner_conn, tenant_id) == [("a", "refusing-model", 1)]

    def test_the_status_shows_a_model_change_in_progress(
        self, database: Database, owner_conn: OwnerConn
    ) -> None:
        tenant_id = _tenant(database)
        _upsert(database, tenant_id, *(ToolCreate(name=f"t{i}") for i in range(3)))
        republish_and_run(database, RefusesPoison())  # serves "refusing-model" now
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            service.reindex(session, tenant_id, force=True)
            jobs = list(session.scalars(text("SELECT id FROM outbox WHERE tenant_id = :t"),
                                        {"t": tenant_id}))  # fmt: skip

        class NextModel(RefusesPoison):
            model = "next-model"

        service.embed_jobs(database, NextModel(), tenant_id, jobs[:2])
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            status = service.status(session, tenant_id)
        assert (status.model, status.other_models) == ("refusing-model", {"next-model": 2})
