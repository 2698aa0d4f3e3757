CREATE POLICY tenant_isolation ON public.learned_queries
USING (tenant_id = NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid)
WITH CHECK (tenant_id = NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid);

CREATE POLICY tool_permission ON public.learned_queries
AS RESTRICTIVE
USING (
    required_permission_id IS NULL
    OR (SELECT current_setting('app.permissions', true)) = '*'
    OR required_permission_id = ANY ((
        SELECT string_to_array(NULLIF(current_setting('app.permissions', true), '*'), ',')::uuid[]
    )::uuid[])
)
WITH CHECK (
    required_permission_id IS NULL
    OR (SELECT current_setting('app.permissions', true)) = '*'
    OR required_permission_id = ANY ((
        SELECT string_to_array(NULLIF(current_setting('app.permissions', true), '*'), ',')::uuid[]
    )::uuid[])
);

CREATE POLICY maintenance_select ON public.learned_queries
FOR SELECT TO toolsift_maintenance USING (true);

CREATE POLICY maintenance_delete ON public.learned_queries
FOR DELETE TO toolsift_maintenance USING (true);

CREATE POLICY analyst_read ON public.learned_queries
FOR SELECT TO toolsift_analyst USING (tenant_id = (SELECT analytics.analyst_tenant()));

CREATE POLICY analyst_pin ON public.learned_queries
AS RESTRICTIVE FOR SELECT TO toolsift_analyst USING (tenant_id = (SELECT analytics.analyst_tenant()));

