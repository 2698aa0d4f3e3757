-- Per day and tool: how often it was offered and how often the model called it.
CREATE VIEW analytics.tool_usage_daily WITH (security_invoker = true) AS
SELECT day, tool_name, sum(selections)::bigint AS selections, sum(calls)::bigint AS calls
FROM (
    SELECT (s.created_at AT TIME ZONE 'UTC')::date AS day, picked.name AS tool_name, 1 AS selections, 0 AS calls
    FROM public.selection_logs s CROSS JOIN LATERAL unnest(s.tool_names) AS picked(name)
    UNION ALL
    SELECT (c.selection_created_at AT TIME ZONE 'UTC')::date, c.tool_name, 0, 1
    FROM public.tool_calls c
) u
GROUP BY day, tool_name
