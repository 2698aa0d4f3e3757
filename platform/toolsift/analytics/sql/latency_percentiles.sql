CREATE VIEW analytics.latency_percentiles WITH (security_invoker = true) AS
SELECT (s.created_at AT TIME ZONE 'UTC')::date AS day, s.mode,
       count(*) AS selections,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY s.latency_ms) AS p50_ms,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY s.latency_ms) AS p95_ms,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY s.latency_ms) AS p99_ms,
       max(s.latency_ms) AS max_ms
FROM public.selection_logs s
GROUP BY 1, 2
