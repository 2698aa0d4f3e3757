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
    SELECT coalesce(
        (SELECT u.oid::regconfig
           FROM public.tenants tn
           JOIN pg_catalog.pg_ts_config c ON c.oid = chosen.config
           JOIN pg_catalog.pg_ts_config u ON u.cfgname = c.cfgname
          WHERE tn.id = p_tenant AND tn.settings -> 'unaccent' = 'true'::jsonb
            AND u.cfgnamespace = 'toolsift_unaccent'::regnamespace),
        chosen.config)
      FROM (SELECT coalesce(
               (SELECT c.oid::regconfig
                  FROM public.tenants tn
                  JOIN pg_catalog.pg_ts_config c ON c.cfgname = tn.settings ->> 'text_search'
                 WHERE tn.id = p_tenant AND c.cfgnamespace = 'pg_catalog'::regnamespace),
               p_default) AS config) chosen
$$;
