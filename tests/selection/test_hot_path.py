"""The one-statement select path against the reference scores and the policies it relies on."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.fixtures.factories import PEPPER, Caller
from toolsift.auth import keys
from toolsift.auth.deps import Principal
from toolsift.db import Database
from toolsift.selection import bm25, dense
from toolsift.selection.service import CANDIDATE_POOL, apply_roles, resolve_roles

OwnerConn = psycopg.Connection[tuple[Any, ...]]
QUERIES = [
    "refund the payment of this order",
    "where is my order shipping status",
    "look up the account by email, then search the help center articles",
    "explain the refund policy for card payments",
]


def _parts(caller: Caller) -> tuple[Any, Any]:
    parsed = keys.parse_key(caller.key)
    assert parsed is not None
    return parsed.tenant_id, parsed.key_id


class TestScores:
    @pytest.mark.parametrize("roles", [["support"], ["billing"], ["support", "billing"]])
    def test_bit_identical_to_the_scoring_statement_in_a_session(
        self, support_agent: Caller, database: Database, roles: list[str]
    ) -> None:
        tenant_id, key_id = _parts(support_agent)
        principal = Principal(tenant_id, key_id, "agent", frozenset({"support", "billing"}))
        for query in QUERIES:
            body = support_agent.ok(
                support_agent.select(query, roles=roles, mode="bm25", debug=True, k=50)
            )
            served = [(c["name"], c["score"], c["matched_terms"]) for c in body["candidates"]]
            with database.unit_of_work(tenant_id) as session:
                apply_roles(session, principal, resolve_roles(principal, roles))
                scored = bm25.score(session, tenant_id, body["query"], limit=CANDIDATE_POOL)
                names = dict(session.execute(bm25.text("SELECT id, name FROM tools")).all())
            expected = [(names[s.tool_id], s.score, s.terms) for s in scored]
            assert served, query
            # Floats compared with ==: the same bits, in the same order.
            assert served == expected


class TestScopeFunction:
    @pytest.mark.parametrize("name", ["toolsift_agent_scope", "toolsift_select", "toolsift_bm25"])
    def test_runs_as_its_caller(self, owner_conn: OwnerConn, name: str) -> None:
        row = owner_conn.execute(
            "SELECT prosecdef, proconfig FROM pg_proc WHERE proname = %s", (name,)
        ).fetchone()
        assert row == (False, None)

    @pytest.mark.parametrize("name", ["toolsift_definitions", "toolsift_missing_embeddings"])
    def test_helpers_run_as_their_caller_under_a_generic_plan(
        self, owner_conn: OwnerConn, name: str
    ) -> None:
        # As the caller, so RLS applies inside; a generic plan, or it is rebuilt on every call.
        row = owner_conn.execute(
            "SELECT prosecdef, proconfig FROM pg_proc WHERE proname = %s", (name,)
        ).fetchone()
        assert row == (False, ["plan_cache_mode=force_generic_plan"])

    def test_without_a_key_it_serves_only_the_tenant_the_transaction_is_scoped_to(
        self, support_agent: Caller, database_url: str
    ) -> None:
        tenant_id, key_id = _parts(support_agent)
        plain = database_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(plain) as conn:
            conn.execute("SET ROLE toolsift_app")
            with pytest.raises(psycopg.Error) as raised:
                conn.execute(
                    "SELECT toolsift_select(%s, %s, NULL, NULL, gen_random_uuid(), 'refund',"
                    " 'english', 1.2, 0.75, NULL, 100, 'bm25', NULL, NULL, '{}', 5, 4000,"
                    " 'anthropic', false, 0)",
                    (tenant_id, key_id),
                )
        assert raised.value.sqlstate == "TSA04"

    def test_binds_even_a_superuser_caller_to_row_level_security(
        self, support_agent: Caller, database_url: str
    ) -> None:
        tenant_id, key_id = _parts(support_agent)
        key_hash = keys.hash_key(support_agent.key, PEPPER)
        plain = database_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(plain) as conn:  # the migrating login, a superuser here
            assert conn.execute(
                "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
            ).fetchone() == (True,)
            granted = conn.execute(
                "SELECT toolsift_agent_scope(%s, %s, %s, %s)",
                (tenant_id, key_id, key_hash, ["support"]),
            ).fetchone()
            assert granted == (["billing", "support"],)
            assert conn.execute("SELECT current_user").fetchone() == ("toolsift_app",)
            names = {r[0] for r in conn.execute("SELECT name FROM tools")}
            assert names == {"search_help", "lookup_account", "order_status", "refund_policy"}

    @pytest.mark.parametrize(
        "fusion",
        [
            {},
            {**dense.DEFAULTS, "k": 0},
            {**dense.DEFAULTS, "bm25_floor": "high"},
            {**dense.DEFAULTS, "usage_weight": -1},
            {**dense.DEFAULTS, "companion_weight": -1},
            {**dense.DEFAULTS, "companion_leads": 0},
            {**dense.DEFAULTS, "companion_support": 0.5},
            {**dense.DEFAULTS, "companion_window": 5000},
        ],
    )
    def test_a_hybrid_select_without_every_fusion_default_in_range_is_refused(
        self, support_agent: Caller, database_url: str, fusion: dict[str, Any]
    ) -> None:
        """The defaults are the caller's (`dense.Fusion`): SQL holds no copy to fall back on."""
        tenant_id, key_id = _parts(support_agent)
        key_hash = keys.hash_key(support_agent.key, PEPPER)
        plain = database_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(plain) as conn, pytest.raises(psycopg.Error) as raised:
            conn.execute(
                "SELECT toolsift_select(%s, %s, %s, NULL, gen_random_uuid(), 'refund',"
                " 'english', 1.2, 0.75, %s, 100, 'hybrid', NULL, NULL, '{}', 5, 4000,"
                " 'anthropic', false, 0)",
                (tenant_id, key_id, key_hash, Jsonb(fusion)),
            )
        assert raised.value.sqlstate == "22023"
        assert "p_fusion" in str(raised.value)

    def test_an_api_from_before_the_usage_list_is_served_without_it(
        self, support_agent: Caller, database_url: str
    ) -> None:
        """During a rolling deploy an older API passes no `usage_weight`: no usage list."""
        tenant_id, key_id = _parts(support_agent)
        key_hash = keys.hash_key(support_agent.key, PEPPER)
        plain = database_url.replace("postgresql+psycopg://", "postgresql://")
        older = {k: v for k, v in dense.DEFAULTS.items() if k != "usage_weight"}
        with psycopg.connect(plain) as conn:
            (body,) = conn.execute(
                "SELECT toolsift_select(%s, %s, %s, NULL, gen_random_uuid(), 'refund',"
                " 'english', 1.2, 0.75, %s, 100, 'hybrid', NULL, NULL, '{}', 5, 4000,"
                " 'anthropic', true, 0)",
                (tenant_id, key_id, key_hash, Jsonb(older)),
            ).fetchone() or (None,)
        candidates = json.loads(body)["candidates"]
        assert candidates
        assert not [c for c in candidates if "usage_rank" in c]

    @pytest.mark.parametrize("change", ["hash", "key_id", "tenant"])
    def test_a_wrong_key_raises_before_anything_else_runs(
        self, support_agent: Caller, admin: Caller, database_url: str, change: str
    ) -> None:
        tenant_id, key_id = _parts(support_agent)
        key_hash = keys.hash_key(support_agent.key, PEPPER)
        if change == "hash":
            key_hash = keys.hash_key(support_agent.key + "x", PEPPER)
        elif change == "key_id":
            key_id = _parts(admin)[1]  # a real key of the tenant, but not this secret's
        else:
            tenant_id = key_id
        plain = database_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(plain) as conn, pytest.raises(psycopg.Error) as raised:
            conn.execute(
                "SELECT toolsift_agent_scope(%s, %s, %s, NULL)", (tenant_id, key_id, key_hash)
            )
        assert raised.value.sqlstate == "TSA01"


class TestRefusals:
    def test_bad_keys_write_no_log_row(
        self, support_agent: Caller, admin: Caller, owner_conn: OwnerConn
    ) -> None:
        before = owner_conn.execute("SELECT count(*) FROM selection_logs").fetchone()
        wrong = Caller(support_agent.client, support_agent.key[:-2] + "xx", admin.tenant_id)
        assert wrong.select("refund").status_code == 401
        assert admin.select("refund").status_code == 403
        assert support_agent.select("refund", roles=["administrator"]).status_code == 403
        assert owner_conn.execute("SELECT count(*) FROM selection_logs").fetchone() == before
        support_agent.ok(support_agent.select("refund"))
        after = owner_conn.execute("SELECT count(*) FROM selection_logs").fetchone()
        assert after is not None
        assert before is not None
        assert after[0] == before[0] + 1
