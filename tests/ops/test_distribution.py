"""Ready for Citus: every tenant table can be distributed by tenant_id (docs/scaling.md)."""

from __future__ import annotations

import psycopg
import pytest

from toolsift.config import libpq_url

OwnerConn = psycopg.Connection[tuple[object, ...]]

# Every schema the migrations made (`analytics` too), not only `public`.
_SCHEMAS = "n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_'"
_TABLES = f"""
SELECT c.oid, c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE {_SCHEMAS} AND c.relkind IN ('r', 'p') AND c.relname <> 'alembic_version'
ORDER BY 2
"""
_CONSTRAINTS = """
SELECT conname, contype,
       ARRAY(SELECT a.attname::text FROM unnest(conkey) WITH ORDINALITY AS k(attnum, i)
             JOIN pg_attribute a ON a.attrelid = conrelid AND a.attnum = k.attnum ORDER BY k.i),
       confrelid::regclass::text,
       ARRAY(SELECT a.attname::text FROM unnest(confkey) WITH ORDINALITY AS k(attnum, i)
             JOIN pg_attribute a ON a.attrelid = confrelid AND a.attnum = k.attnum ORDER BY k.i)
FROM pg_constraint WHERE conrelid = %s AND contype IN ('p', 'u', 'f', 'x')
"""
_GENERATED = """
SELECT attname FROM pg_attribute
WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped AND (attidentity <> '' OR EXISTS (
  SELECT 1 FROM pg_attrdef d WHERE d.adrelid = attrelid AND d.adnum = attnum
  AND pg_get_expr(d.adbin, d.adrelid) LIKE '%%nextval(%%'))
"""
# Unique indexes that back no constraint (CREATE UNIQUE INDEX): Citus refuses them too.
_UNIQUE_INDEXES = """
SELECT i.indexrelid::regclass::text, ARRAY(SELECT a.attname::text FROM unnest(i.indkey) k
       JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k)
FROM pg_index i WHERE i.indrelid = %s AND i.indisunique
AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
"""
# A sequence reached any way (serial, a default calling a function that calls nextval): ids
# are made by the application, so none should exist at all.
_SEQUENCES = f"""
SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE {_SCHEMAS} AND c.relkind = 'S'
"""


def _distribution_column(table: str) -> str:
    return "id" if table == "tenants" else "tenant_id"


def test_every_key_of_every_tenant_table_carries_tenant_id(owner_conn: OwnerConn) -> None:
    assert len(owner_conn.execute(_TABLES).fetchall()) >= 12
    assert schema_problems(owner_conn) == []


@pytest.mark.parametrize(
    ("ddl", "found"),
    [
        ("ALTER TABLE api_keys ADD CONSTRAINT qa_u UNIQUE (prefix)", "api_keys.qa_u: u key"),
        ("CREATE UNIQUE INDEX qa_i ON api_keys (prefix)", "api_keys.qa_i: unique index"),
        (
            "ALTER TABLE api_keys ADD CONSTRAINT qa_x EXCLUDE USING btree (prefix WITH =)",
            "api_keys.qa_x: x key",
        ),
        (
            "ALTER TABLE tools ADD CONSTRAINT qa_f FOREIGN KEY (tenant_id, required_permission_id)"
            " REFERENCES permissions (id, tenant_id)",
            "tools.qa_f: foreign key to permissions does not match",
        ),
        ("ALTER TABLE api_keys ADD COLUMN qa_n bigserial", "api_keys.qa_n: sequence-generated"),
        (
            "ALTER TABLE api_keys ADD COLUMN qa_n bigint GENERATED ALWAYS AS IDENTITY",
            "api_keys.qa_n: sequence-generated",
        ),
        (
            "CREATE TABLE analytics.qa_notes (id uuid PRIMARY KEY, tenant_id uuid NOT NULL)",
            "analytics.qa_notes.qa_notes_pkey: p key ['id'] lacks tenant_id",
        ),
        (
            "CREATE SEQUENCE qa_seq; CREATE FUNCTION qa_next() RETURNS bigint LANGUAGE sql"
            " AS 'SELECT nextval(''qa_seq'')';"
            " ALTER TABLE api_keys ADD COLUMN qa_no bigint DEFAULT qa_next()",
            "sequence qa_seq",
        ),
    ],
)
def test_each_way_to_break_distribution_is_found(database_url: str, ddl: str, found: str) -> None:
    """The check itself, against the schema changed in a transaction that is rolled back."""
    with psycopg.connect(libpq_url(database_url)) as conn:
        try:
            conn.execute(ddl)  # type: ignore[arg-type]  # literal DDL of this test
            problems = schema_problems(conn)
        finally:
            conn.rollback()
    assert any(found in problem for problem in problems), problems


def schema_problems(owner_conn: OwnerConn) -> list[str]:
    """What would keep a table from being distributed by its tenant, or an id from being
    made on any node."""
    problems: list[str] = []
    tables = owner_conn.execute(_TABLES).fetchall()
    for oid, table in tables:
        column = _distribution_column(str(table))
        columns = {
            str(r[0])
            for r in owner_conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0", (oid,)
            )
        }
        if column not in columns:
            problems.append(f"{table}: no {column} column (not a tenant table: make it a"
                            " reference table in docs/scaling.md, or add tenant_id)")  # fmt: skip
            continue
        has_pk = False
        for name, kind, cols, target, target_cols in owner_conn.execute(_CONSTRAINTS, (oid,)):
            has_pk |= kind == "p"
            if column not in cols:
                problems.append(f"{table}.{name}: {kind} key {cols} lacks {column}")
            if kind == "f":
                wanted = _distribution_column(str(target))
                pairs = dict(zip(cols, target_cols, strict=True))
                if pairs.get(column) != wanted:
                    problems.append(
                        f"{table}.{name}: foreign key to {target} does not match "
                        f"{column} -> {wanted}: {pairs}"
                    )
        for name, cols in owner_conn.execute(_UNIQUE_INDEXES, (oid,)):
            if column not in cols:
                problems.append(f"{table}.{name}: unique index {cols} lacks {column}")
        if not has_pk:
            problems.append(f"{table}: no primary key")
        for (generated,) in owner_conn.execute(_GENERATED, (oid,)):
            problems.append(f"{table}.{generated}: sequence-generated id (use app-made UUIDs)")
    for (sequence,) in owner_conn.execute(_SEQUENCES):
        problems.append(f"sequence {sequence}: ids are made by the application (UUIDs)")
    return problems
