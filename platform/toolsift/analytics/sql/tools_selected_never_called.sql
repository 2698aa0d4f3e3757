CREATE VIEW analytics.tools_selected_never_called WITH (security_invoker = true) AS
SELECT t.id AS tool_id, t.name, t.core, count(*) AS selections,
       max(s.created_at) AS last_selected
FROM public.selection_logs s
CROSS JOIN LATERAL unnest(s.tool_ids) AS picked(tool_id)
JOIN public.tools t ON t.tenant_id = s.tenant_id AND t.id = picked.tool_id
WHERE t.deleted_at IS NULL
  AND NOT EXISTS (
      SELECT 1 FROM public.tool_calls c
      WHERE c.tenant_id = t.tenant_id AND c.tool_name = t.name)
GROUP BY t.id, t.name, t.core
