"""The functions, views and policies the app owns, each read from a `.sql` file of its domain.

A file under `<domain>/sql/` is the one source of its objects: to change a scoring rule, edit
`selection/sql/toolsift_select.sql` and run `alembic revision --autogenerate`, which compares
every file with the database (alembic_utils) and writes the migration that makes them agree,
its SQL as literal text. `tests/test_database_objects.py` fails while the files and a migrated
database differ, so a file edited without its migration, or a migration without its file,
does not land.

A function or view file holds one `CREATE` statement; a file under `access/sql/policies/`
holds the policies of one table (what guards a table is read in one place). `--` lines
before a statement say why it is so; they are not part of it.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from pathlib import Path
from typing import Any

from alembic.autogenerate import comparators
from alembic.autogenerate.api import AutogenContext
from alembic.operations.ops import UpgradeOps
from alembic_utils.pg_function import PGFunction
from alembic_utils.pg_policy import PGPolicy
from alembic_utils.pg_view import PGView
from alembic_utils.replaceable_entity import ReplaceableEntity, registry
from alembic_utils.reversible_op import DropOp
from sqlalchemy import TextClause
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Session

PACKAGE = Path(__file__).resolve().parent
DOMAINS = ("access", "analytics", "lexical", "ops", "selection", "tools")

# A statement's end in a policy file: policies hold no `;` of their own.
_END = re.compile(r";[ \t]*(?:\n|$)")
_VIEW = re.compile(
    r"create\s+view\s+(?P<schema>\w+)\.(?P<name>\w+)\s+"
    r"with\s*\(\s*security_invoker\s*=\s*true\s*\)\s+as\s+(?P<body>.+)",
    re.IGNORECASE | re.DOTALL,
)
_NOT_INVOKER = "-- not security_invoker: reads with its owner's rights\n"
_DEFAULT = re.compile(r"\s+default\s.*$|\s*=.*$", re.IGNORECASE | re.DOTALL)


class Function(PGFunction):
    """alembic_utils' PGFunction, its arguments written one per line, dropped correctly.

    PGFunction cuts each argument at the first "default" it contains, name included: a
    parameter named `default_days` left `DROP FUNCTION f(days integer, )`, a syntax error."""

    def __init__(self, schema: str, signature: str, definition: str) -> None:
        # Arguments one per line, as the files write them, are the same signature.
        super().__init__(
            schema, re.sub(r"\(\s+", "(", re.sub(r",?\s+\)", ")", signature)), definition
        )

    def to_sql_statement_drop(self, cascade: bool = False) -> TextClause:
        name, _, arguments = self.signature.partition("(")
        # A default is never a list, so no argument's default holds a comma.
        kept = [_DEFAULT.sub("", a).strip() for a in arguments.rpartition(")")[0].split(",")]
        listed = ", ".join(a for a in kept if a)
        return sql_text(
            f'DROP FUNCTION {self.literal_schema}."{name.strip()}"({listed})'
            + (" CASCADE" if cascade else "")
        )


class InvokerView(PGView):
    """A view that reads with its caller's rights (`security_invoker`), so row-level security
    applies to the analyst querying it and not to its owner, who sees every tenant.

    alembic_utils' PGView writes no view options: a view it created or replaced would lose
    the option silently. Here the option is part of the comparison: a view without it is
    reported as different (and replaced with it)."""

    @classmethod
    def from_sql(cls, sql: str) -> InvokerView:
        match = _VIEW.fullmatch(sql.strip())
        if match is None:
            raise ValueError(
                "a view is written `CREATE VIEW schema.name WITH (security_invoker = true) AS`"
            )
        return cls(match["schema"], match["name"], match["body"])

    def to_sql_statement_create(self) -> TextClause:
        return sql_text(
            f'CREATE VIEW {self.literal_schema}."{self.signature}"'
            f" WITH (security_invoker = true) AS {self.definition}"
        )

    def to_sql_statement_create_or_replace(self) -> Generator[TextClause, None, None]:
        # OR REPLACE keeps the view's grants; a change it cannot make (a column dropped or
        # renamed) fails the migration instead of dropping the view and its grants.
        yield sql_text(
            f'CREATE OR REPLACE VIEW {self.literal_schema}."{self.signature}"'
            f" WITH (security_invoker = true) AS {self.definition}"
        )

    @classmethod
    def from_database(cls, sess: Session, schema: Any = "%") -> list[InvokerView]:  # type: ignore[override]
        rows = sess.execute(
            sql_text(
                "SELECT n.nspname, c.relname, pg_get_viewdef(c.oid),"
                " coalesce(c.reloptions, '{}') @> '{security_invoker=true}'"
                " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE c.relkind = 'v' AND n.nspname LIKE :schema"
            ),
            {"schema": schema},
        ).fetchall()
        return [
            cls(space, name, body if invoker else _NOT_INVOKER + body)
            for space, name, body, invoker in rows
        ]


def _without_comments_before(statement: str) -> str:
    lines = statement.strip().splitlines()
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
        lines.pop(0)
    return "\n".join(lines)


def _entity(path: Path, statement: str) -> ReplaceableEntity:
    kind = " ".join(statement.split()[:2]).lower()
    if kind == "create function":
        return Function.from_sql(statement)
    if kind == "create view":
        return InvokerView.from_sql(statement)
    if kind == "create policy":
        return PGPolicy.from_sql(statement)
    raise ValueError(f"{path}: expected a function, a view or policies, not {kind!r}")


def files(root: Path = PACKAGE) -> list[Path]:
    """Every source file, in a fixed order."""
    return sorted(path for domain in DOMAINS for path in (root / domain / "sql").rglob("*.sql"))


def read(path: Path) -> list[ReplaceableEntity]:
    """The objects one file defines: one function or view, or one table's policies."""
    text = path.read_text()
    if path.parent.name == "policies":
        statements = [_without_comments_before(chunk) for chunk in _END.split(text)]
        return [_entity(path, statement) for statement in statements if statement]
    # A function's body holds `;`s of its own: the file is one statement.
    return [_entity(path, _without_comments_before(text))]


def entities(root: Path = PACKAGE) -> list[ReplaceableEntity]:
    """Every function, view and policy the app owns."""
    found: list[ReplaceableEntity] = []
    seen: dict[str, Path] = {}
    for path in files(root):
        for entity in read(path):
            if entity.identity in seen:
                raise ValueError(f"{path}: {entity.identity} is also in {seen[entity.identity]}")
            seen[entity.identity] = path
            found.append(entity)
    return found


ENTITY_TYPES = (Function, InvokerView, PGPolicy)


@comparators.dispatch_for("schema")
def _compare_drops(autogen_context: AutogenContext, upgrade_ops: UpgradeOps, _schemas: Any) -> None:
    """A function or view in the database that no file defines is dropped.

    alembic_utils looks for objects to drop only among its classes' direct subclasses, so
    never among `Function`s and `InvokerView`s; this is that search, for them."""
    if not set(ENTITY_TYPES) <= registry.entity_types or autogen_context.connection is None:
        return
    local = {entity.identity for entity in registry.entities()}
    schemas = sorted({entity.schema for entity in registry.entities()})
    connection = autogen_context.connection
    connection.begin_nested()
    session = Session(bind=connection)
    try:
        for kind in (Function, InvokerView):
            for schema in schemas:
                for found in kind.from_database(session, schema):
                    if found.identity not in local:
                        upgrade_ops.ops.append(DropOp(found))
    finally:
        session.rollback()  # and the savepoint with it, as alembic_utils does
