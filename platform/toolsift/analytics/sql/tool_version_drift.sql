-- For each new version of a tool: its share of the tenant's selections while the previous
-- version served against its share since (until the next version, or now).
CREATE VIEW analytics.tool_version_drift WITH (security_invoker = true) AS
WITH spans AS (
    SELECT v.tenant_id, v.tool_id, v.version, v.changed_at,
           v.description_md5 IS DISTINCT FROM lag(v.description_md5)
               OVER w AS description_changed,
           lag(v.changed_at) OVER w AS previous_at,
           coalesce(lead(v.changed_at) OVER w, 'infinity') AS next_at
    FROM public.tool_versions v
    WINDOW w AS (PARTITION BY v.tenant_id, v.tool_id ORDER BY v.version)
), counted AS (
    SELECT sp.*,
           (SELECT count(*) FROM public.selection_logs s
            WHERE s.tenant_id = sp.tenant_id AND s.created_at >= sp.previous_at
              AND s.created_at < sp.changed_at) AS selections_before,
           (SELECT count(*) FROM public.selection_logs s
            WHERE s.tenant_id = sp.tenant_id AND s.created_at >= sp.previous_at
              AND s.created_at < sp.changed_at AND sp.tool_id = ANY (s.tool_ids))
               AS selected_before,
           (SELECT count(*) FROM public.selection_logs s
            WHERE s.tenant_id = sp.tenant_id AND s.created_at >= sp.changed_at
              AND s.created_at < sp.next_at) AS selections_after,
           (SELECT count(*) FROM public.selection_logs s
            WHERE s.tenant_id = sp.tenant_id AND s.created_at >= sp.changed_at
              AND s.created_at < sp.next_at AND sp.tool_id = ANY (s.tool_ids))
               AS selected_after
    FROM spans sp
    WHERE sp.previous_at IS NOT NULL
)
SELECT c.tool_id, t.name, c.version, c.changed_at, c.description_changed,
       c.selections_before, c.selected_before,
       c.selected_before::double precision / NULLIF(c.selections_before, 0) AS rate_before,
       c.selections_after, c.selected_after,
       c.selected_after::double precision / NULLIF(c.selections_after, 0) AS rate_after,
       c.selected_after::double precision / NULLIF(c.selections_after, 0)
           - c.selected_before::double precision / NULLIF(c.selections_before, 0)
           AS rate_change
FROM counted c
JOIN public.tools t ON t.tenant_id = c.tenant_id AND t.id = c.tool_id
