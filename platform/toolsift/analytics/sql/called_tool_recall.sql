-- Of the tools the model called after a select, the share that select had offered.
CREATE VIEW analytics.called_tool_recall WITH (security_invoker = true) AS
SELECT (s.created_at AT TIME ZONE 'UTC')::date AS day, s.mode,
       count(*) AS calls,
       count(*) FILTER (WHERE c.tool_name = ANY (s.tool_names)) AS hits,
       (count(*) FILTER (WHERE c.tool_name = ANY (s.tool_names)))::double precision
           / count(*) AS recall
FROM public.tool_calls c
JOIN public.selection_logs s
  ON s.tenant_id = c.tenant_id AND s.created_at = c.selection_created_at
 AND s.id = c.selection_id
GROUP BY 1, 2
