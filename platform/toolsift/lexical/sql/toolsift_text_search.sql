-- The text search configuration a tenant's text is analysed with, its tools' and its
-- queries' alike: its `text_search` setting where that names one of PostgreSQL's own
-- configurations (a language's stemmer and stop words, or `simple`), else p_default, the
-- app's; and with `unaccent` true, that configuration's twin in `toolsift_unaccent`,
-- which folds accents first ("créer" and "creer" are one word). Read where the text is
-- analysed, so a tool write and a select can never use different ones: a change of either
-- setting indexes the catalog again in its transaction.
CREATE FUNCTION public.toolsift_text_search(
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
$$;
