"""Accents folded, for a tenant that asks.

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-07 20:00:00+00:00

Of PostgreSQL's Snowball stemmers, German and Spanish drop accents and French, Portuguese,
Italian and English keep them: a French catalog's "créer une facture" was not found by
"creer facture", the way users type in chat. A tenant's `unaccent` setting (true) now folds
accents before its configuration stems. `toolsift_unaccent` holds a twin of each of the
server's own configurations that runs the `unaccent` extension's dictionary first, for the
token types that may hold letters outside ASCII; `toolsift_text_search` returns the twin of
the tenant's configuration when the setting is true (replaced in place, same signature and
grants). A tenant that already stored `unaccent: true` (kept as an unknown setting before)
gets a `learn` job for each live tool, up and down, which indexes it again. The function's
text is `platform/toolsift/lexical/sql/toolsift_text_search.sql`'s, written out; the way down
is 0036's.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0037"
down_revision: str | None = "0036"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "toolsift_app"
SCHEMA = "toolsift_unaccent"

# A twin of each configuration of `pg_catalog` (whatever this server's version has), whose
# word types run `unaccent` before their own dictionaries: `word`, `hword` and `hword_part`
# hold letters outside ASCII, the `num` ones letters and digits. `asciiword` has no accent.
# A language's stop words are matched as written, before folding ("été" and "à" are French
# stop words, "ete" and "a" are not): by a `simple` dictionary that knows only them and
# passes every other word on (ACCEPT false), named after the configuration.
TWINS = r"""
DO $$
DECLARE
    cfg name;
    map record;
    dict text := (SELECT format('%I.unaccent', n.nspname)
                    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
                   WHERE e.extname = 'unaccent');
    stopwords text;
    first text;
BEGIN
    FOR cfg IN
        SELECT cfgname FROM pg_ts_config
         WHERE cfgnamespace = 'pg_catalog'::regnamespace ORDER BY cfgname
    LOOP
        EXECUTE format(
            'CREATE TEXT SEARCH CONFIGURATION toolsift_unaccent.%I (COPY = pg_catalog.%I)',
            cfg, cfg);
        -- The stop words of the configuration's word dictionary, if it has any.
        SELECT substring(d.dictinitoption FROM $re$stopwords\s*=\s*'([^']+)'$re$)
          INTO stopwords
          FROM pg_ts_config_map m
          JOIN ts_token_type('default') t ON t.tokid = m.maptokentype
          JOIN pg_ts_dict d ON d.oid = m.mapdict
         WHERE m.mapcfg = format('pg_catalog.%I', cfg)::regconfig AND t.alias = 'word'
         ORDER BY m.mapseqno LIMIT 1;
        first := '';
        IF stopwords IS NOT NULL THEN
            EXECUTE format(
                'CREATE TEXT SEARCH DICTIONARY toolsift_unaccent.%I'
                ' (TEMPLATE = pg_catalog.simple, STOPWORDS = %I, ACCEPT = false)',
                cfg || '_stop', stopwords);
            first := format('toolsift_unaccent.%I, ', cfg || '_stop');
        END IF;
        FOR map IN
            SELECT t.alias,
                   string_agg(m.mapdict::regdictionary::text, ', ' ORDER BY m.mapseqno) AS dicts
              FROM pg_ts_config_map m
              JOIN ts_token_type('default') t ON t.tokid = m.maptokentype
             WHERE m.mapcfg = format('toolsift_unaccent.%I', cfg)::regconfig
               AND t.alias IN ('word', 'hword', 'hword_part', 'numword', 'numhword',
                               'hword_numpart')
             GROUP BY t.alias
        LOOP
            EXECUTE format(
                'ALTER TEXT SEARCH CONFIGURATION toolsift_unaccent.%I'
                ' ALTER MAPPING FOR %s WITH %s%s, %s', cfg, map.alias, first, dict, map.dicts);
        END LOOP;
    END LOOP;
END
$$
"""

TEXT_SEARCH = r"""
-- The text search configuration a tenant's text is analysed with, its tools' and its
-- queries' alike: its `text_search` setting where that names one of PostgreSQL's own
-- configurations (a language's stemmer and stop words, or `simple`), else p_default, the
-- app's; and with `unaccent` true, that configuration's twin in `toolsift_unaccent`,
-- which folds accents first ("créer" and "creer" are one word). Read where the text is
-- analysed, so a tool write and a select can never use different ones: a change of either
-- setting indexes the catalog again in its transaction.
CREATE OR REPLACE FUNCTION public.toolsift_text_search(
    p_tenant uuid,
    p_default regconfig
)
RETURNS regconfig
LANGUAGE sql
STABLE PARALLEL SAFE
AS $$
    -- Names are read as casts, which the server's caches answer: scanning pg_ts_config
    -- made the function twice as costly. A configuration of pg_catalog prints unqualified.
    SELECT coalesce(
        (SELECT CASE WHEN tn.settings -> 'unaccent' = 'true'::jsonb
                          AND pg_input_is_valid(twin.name, 'regconfig')
                     THEN twin.name::regconfig
                     ELSE chosen.config END
           FROM public.tenants tn
          CROSS JOIN LATERAL (
                SELECT 'pg_catalog.' || quote_ident(tn.settings ->> 'text_search') AS name) own
          CROSS JOIN LATERAL (
                SELECT CASE WHEN pg_input_is_valid(own.name, 'regconfig')
                            THEN own.name::regconfig
                            ELSE p_default END AS config) chosen
          CROSS JOIN LATERAL (
                SELECT 'toolsift_unaccent.' || quote_ident(chosen.config::text) AS name) twin
          WHERE tn.id = p_tenant),
        p_default)
$$
"""

TEXT_SEARCH_0036 = r"""
-- The text search configuration a tenant's text is analysed with, its tools' and its
-- queries' alike: its `text_search` setting where that names one of PostgreSQL's own
-- configurations (a language's stemmer and stop words, or `simple`), else p_default, the
-- app's. Read where the text is analysed, so a tool write and a select can never use
-- different ones: a change of the setting indexes the catalog again in its transaction.
CREATE OR REPLACE FUNCTION public.toolsift_text_search(
    p_tenant uuid,
    p_default regconfig
)
RETURNS regconfig
LANGUAGE sql
STABLE PARALLEL SAFE
AS $$
    SELECT coalesce(
        (SELECT c.oid::regconfig
           FROM public.tenants tn
           JOIN pg_catalog.pg_ts_config c ON c.cfgname = tn.settings ->> 'text_search'
          WHERE tn.id = p_tenant AND c.cfgnamespace = 'pg_catalog'::regnamespace),
        p_default)
$$
"""

# Each live tool of the tenants whose configuration the setting changes, as that tenant.
QUEUE_FOLDED = r"""
DO $$
DECLARE
    tenant uuid;
BEGIN
    PERFORM set_config('app.permissions', '*', true);
    FOR tenant IN
        SELECT id FROM tenants WHERE settings -> 'unaccent' = 'true'::jsonb ORDER BY id
    LOOP
        PERFORM set_config('app.tenant_id', tenant::text, true);
        INSERT INTO outbox (tenant_id, id, kind, tool_id, attempts)
        SELECT tenant, gen_random_uuid(), 'learn', t.id, 0
        FROM tools t
        WHERE t.tenant_id = tenant AND t.deleted_at IS NULL;
    END LOOP;
    PERFORM set_config('app.tenant_id', '', true);
    PERFORM set_config('app.permissions', '', true);
END
$$
"""


def upgrade() -> None:
    # Trusted (PostgreSQL 13+): a login that may create in the database may create it.
    op.execute("CREATE EXTENSION IF NOT EXISTS unaccent SCHEMA public")
    op.execute(f"CREATE SCHEMA {SCHEMA}")
    op.execute(f"GRANT USAGE ON SCHEMA {SCHEMA} TO {APP_ROLE}")
    op.execute(TWINS)
    op.execute(TEXT_SEARCH)
    op.execute(QUEUE_FOLDED)


def downgrade() -> None:
    op.execute(QUEUE_FOLDED)
    op.execute(TEXT_SEARCH_0036)
    op.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
    op.execute("DROP EXTENSION IF EXISTS unaccent")
