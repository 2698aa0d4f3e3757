"""An analyst login's statements stop after a minute.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-05 13:00:00+00:00

An analyst login reads its tenant's views with plain SQL, on the database the API serves
from, and nothing bounded how long one of its statements ran: a cross join of the logs
could hold a core for as long as the analyst waited. Each login now has
`statement_timeout = 60s` (an analyst may lower it for a session, and raise it too: it is a
default, as `default_transaction_read_only` is, and bounds the careless query, not a
determined one). `analytics.set_analyst_login` sets it on a new login and on one whose
password it changes; the logins that exist get it here. The function is 0003's, with the
`search_path` 0016 gave it, and the one statement more.
"""

from collections.abc import Sequence
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ANALYST_ROLE = "toolsift_analyst"
TIMEOUT = "60s"

SEARCH_PATH_0003 = "SET search_path = pg_catalog AS $$"
SEARCH_PATH_0016 = "SET search_path = pg_catalog, pg_temp AS $$"
# Both branches (a new login, a new password) end here.
END_OF_BRANCHES = "    END IF;\n    RETURN login;\n"
TIMEOUT_SET = (
    "    END IF;\n"
    f"    EXECUTE format('ALTER ROLE %I SET statement_timeout = %L', login, '{TIMEOUT}');\n"
    "    RETURN login;\n"
)

# Every analyst login: a member of the group, named after its tenant. (Built of constants.)
EACH_LOGIN = f"""
DO $$
DECLARE
    login text;
BEGIN
    FOR login IN SELECT rolname FROM pg_catalog.pg_roles
                 WHERE rolname ~ '^{ANALYST_ROLE}_[0-9a-f]{{32}}$'
                   AND pg_catalog.pg_has_role(rolname, '{ANALYST_ROLE}', 'MEMBER')
    LOOP
        EXECUTE format(%s, login);
    END LOOP;
END
$$
"""  # noqa: S608


def _revision_0003() -> ModuleType:
    path = Path(__file__).with_name("2026-12-03-1500_selection_analytics.py")
    spec = spec_from_file_location("toolsift_migration_0003", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _login_function(*, with_timeout: bool) -> str:
    """0003's function as 0016 left it (`pg_temp` last), with or without the timeout."""
    text = str(_revision_0003().ANALYST_LOGIN_FN)
    for old in ("CREATE FUNCTION analytics.set_analyst_login(", SEARCH_PATH_0003, END_OF_BRANCHES):
        if text.count(old) != 1:
            raise RuntimeError(f"0003's analytics.set_analyst_login changed: {old!r}")
    text = text.replace(
        "CREATE FUNCTION analytics.set_analyst_login(",
        "CREATE OR REPLACE FUNCTION analytics.set_analyst_login(",
    ).replace(SEARCH_PATH_0003, SEARCH_PATH_0016)
    return text.replace(END_OF_BRANCHES, TIMEOUT_SET) if with_timeout else text


def upgrade() -> None:
    op.execute(_login_function(with_timeout=True))
    op.execute(EACH_LOGIN % f"'ALTER ROLE %I SET statement_timeout = ''{TIMEOUT}'''")


def downgrade() -> None:
    op.execute(_login_function(with_timeout=False))
    op.execute(EACH_LOGIN % "'ALTER ROLE %I RESET statement_timeout'")
