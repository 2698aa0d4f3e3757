-- An equality anti-join on the unnested ids: `t.id = ANY (s.tool_ids)` would rescan the
-- logs once per tool.
CREATE VIEW analytics.tools_never_selected WITH (security_invoker = true) AS
SELECT t.id AS tool_id, t.name, t.core, t.created_at
FROM public.tools t
WHERE t.deleted_at IS NULL
  AND NOT EXISTS (
      SELECT 1
      FROM public.selection_logs s CROSS JOIN LATERAL unnest(s.tool_ids) AS p(tool_id)
      WHERE s.tenant_id = t.tenant_id AND p.tool_id = t.id)
