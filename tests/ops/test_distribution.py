"""Ready for Citus: every tenant table can be distributed by tenant_id (docs/scaling.md)."""

from __future__ import annotations

import psycopg

OwnerConn = psycopg.Connection[tuple[object, ...]]

_TABLES = """
SELECT c.oid, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname <> 'alembic_version'
ORDER BY 2
"""
_CONSTRAINTS = """
SELECT conname, contype, ARRAY(SELECT a.attname::text FROM unnest(conkey) k
       JOIN pg_attribute a ON a.attrelid = conrelid AND a.attnum = k),
       confrelid::regclass::text,
       ARRAY(SELECT a.attname::text FROM unnest(confkey) k
       JOIN pg_attribute a ON a.attrelid = confrelid AND a.attnum = k)
FROM pg_constraint WHERE conrelid = %s AND contype IN ('p', 'u', 'f')
"""
_GENERATED = """
SELECT attname FROM pg_attribute
WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped AND (attidentity <> '' OR EXISTS (
  SELECT 1 FROM pg_attrdef d WHERE d.adrelid = attrelid AND d.adnum = attnum
  AND pg_get_expr(d.adbin, d.adrelid) LIKE 'nextval(%%'))
"""


def _distribution_column(table: str) -> str:
    return "id" if table == "tenants" else "tenant_id"


def test_every_key_of_every_tenant_table_carries_tenant_id(owner_conn: OwnerConn) -> None:
    problems: list[str] = []
    tables = owner_conn.execute(_TABLES).fetchall()
    assert len(tables) >= 12
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
        if not has_pk:
            problems.append(f"{table}: no primary key")
        for (generated,) in owner_conn.execute(_GENERATED, (oid,)):
            problems.append(f"{table}.{generated}: sequence-generated id (use app-made UUIDs)")
    assert problems == []
