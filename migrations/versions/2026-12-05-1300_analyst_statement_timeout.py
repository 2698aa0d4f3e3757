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

from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ANALYST_ROLE = "toolsift_analyst"
TIMEOUT = "60s"

# 0003's function as 0016 left it (`pg_temp` last in its search_path), with one statement
# more where both branches (a new login, a new password) end:
# `EXECUTE format('ALTER ROLE %I SET statement_timeout = %L', login, '{TIMEOUT}')`.
LOGIN_FUNCTION = r"""
CREATE OR REPLACE FUNCTION analytics.set_analyst_login(verifier text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    tenant uuid := NULLIF(current_setting('app.tenant_id', true), '')::uuid;
    login text;
BEGIN
    IF tenant IS NULL THEN
        RAISE EXCEPTION 'no tenant in this transaction' USING ERRCODE = '42501';
    END IF;
    IF verifier IS NULL OR verifier !~ '^SCRAM-SHA-256\$' THEN
        RAISE EXCEPTION 'a SCRAM-SHA-256 verifier is required' USING ERRCODE = '22023';
    END IF;
    login := 'toolsift_analyst_' || replace(tenant::text, '-', '');
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = login) THEN
        EXECUTE format('ALTER ROLE %I PASSWORD %L', login, verifier);
    ELSE
        EXECUTE format('CREATE ROLE %I LOGIN INHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE'
                       ' NOBYPASSRLS NOREPLICATION CONNECTION LIMIT 5 PASSWORD %L IN ROLE toolsift_analyst',
                       login, verifier);
        EXECUTE format('ALTER ROLE %I SET default_transaction_read_only = on', login);
        EXECUTE format('ALTER ROLE %I SET search_path = analytics, public', login);
        -- The tenant is pinned by the analyst policies; within it the whole catalog counts.
        -- Only a superuser may store a custom setting on a role; otherwise the analyst passes
        -- it when connecting (options=-c app.permissions=*), as the API answer says.
        BEGIN
            EXECUTE format('ALTER ROLE %I SET app.permissions = %L', login, '*');
        EXCEPTION WHEN insufficient_privilege THEN
            NULL;
        END;
    END IF;
    EXECUTE format('ALTER ROLE %I SET statement_timeout = %L', login, '60s');
    RETURN login;
END
$$
"""

# The way down: the function as 0016 left it, a frozen copy of its text.
LOGIN_FUNCTION_BEFORE = r"""
CREATE OR REPLACE FUNCTION analytics.set_analyst_login(verifier text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    tenant uuid := NULLIF(current_setting('app.tenant_id', true), '')::uuid;
    login text;
BEGIN
    IF tenant IS NULL THEN
        RAISE EXCEPTION 'no tenant in this transaction' USING ERRCODE = '42501';
    END IF;
    IF verifier IS NULL OR verifier !~ '^SCRAM-SHA-256\$' THEN
        RAISE EXCEPTION 'a SCRAM-SHA-256 verifier is required' USING ERRCODE = '22023';
    END IF;
    login := 'toolsift_analyst_' || replace(tenant::text, '-', '');
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = login) THEN
        EXECUTE format('ALTER ROLE %I PASSWORD %L', login, verifier);
    ELSE
        EXECUTE format('CREATE ROLE %I LOGIN INHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE'
                       ' NOBYPASSRLS NOREPLICATION CONNECTION LIMIT 5 PASSWORD %L IN ROLE toolsift_analyst',
                       login, verifier);
        EXECUTE format('ALTER ROLE %I SET default_transaction_read_only = on', login);
        EXECUTE format('ALTER ROLE %I SET search_path = analytics, public', login);
        -- The tenant is pinned by the analyst policies; within it the whole catalog counts.
        -- Only a superuser may store a custom setting on a role; otherwise the analyst passes
        -- it when connecting (options=-c app.permissions=*), as the API answer says.
        BEGIN
            EXECUTE format('ALTER ROLE %I SET app.permissions = %L', login, '*');
        EXCEPTION WHEN insufficient_privilege THEN
            NULL;
        END;
    END IF;
    RETURN login;
END
$$
"""

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


def upgrade() -> None:
    op.execute(LOGIN_FUNCTION)
    op.execute(EACH_LOGIN % f"'ALTER ROLE %I SET statement_timeout = ''{TIMEOUT}'''")


def downgrade() -> None:
    op.execute(LOGIN_FUNCTION_BEFORE)
    op.execute(EACH_LOGIN % "'ALTER ROLE %I RESET statement_timeout'")
