-- Tokens of the definitions sent against those of the caller's whole allowed catalog.
CREATE VIEW analytics.tokens_per_turn WITH (security_invoker = true) AS
SELECT (s.created_at AT TIME ZONE 'UTC')::date AS day,
       count(*) AS selections,
       sum(s.tokens) AS tokens_sent,
       sum(s.catalog_tokens) AS catalog_tokens,
       sum(s.catalog_tokens) - sum(s.tokens) AS tokens_saved,
       CASE WHEN sum(s.catalog_tokens) > 0
            THEN 1 - sum(s.tokens)::double precision / sum(s.catalog_tokens) END
           AS saved_share,
       avg(s.tokens)::double precision AS avg_tokens,
       avg(s.catalog_tokens)::double precision AS avg_catalog_tokens
FROM public.selection_logs s
GROUP BY 1
