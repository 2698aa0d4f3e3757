-- zero_result: nothing at all was ranked; no_word_match: a hybrid select whose words matched
-- no tool (dense still ranked some); core_only: only core tools came back.
CREATE VIEW analytics.zero_result_queries WITH (security_invoker = true) AS
SELECT kind, query, count(*) AS selections,
       min(created_at) AS first_seen, max(created_at) AS last_seen
FROM (
    SELECT s.query, s.created_at,
           CASE WHEN s.candidate_count = 0 THEN 'zero_result'
                WHEN s.mode = 'hybrid' AND s.lexical_count = 0 THEN 'no_word_match'
                WHEN NOT EXISTS (SELECT 1 FROM jsonb_array_elements(s.details) d
                                 WHERE d ->> 'reason' <> 'core') THEN 'core_only'
           END AS kind
    FROM public.selection_logs s
) q
WHERE kind IS NOT NULL
GROUP BY kind, query
