CREATE POLICY tenant_isolation ON public.selection_logs
USING (tenant_id = NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid)
WITH CHECK (tenant_id = NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid);

CREATE POLICY maintenance_select ON public.selection_logs
FOR SELECT TO toolsift_maintenance USING (true);

CREATE POLICY maintenance_delete ON public.selection_logs
FOR DELETE TO toolsift_maintenance USING (true);

CREATE POLICY analyst_read ON public.selection_logs
FOR SELECT TO toolsift_analyst USING (tenant_id = (SELECT analytics.analyst_tenant()));

CREATE POLICY analyst_pin ON public.selection_logs
AS RESTRICTIVE FOR SELECT TO toolsift_analyst USING (tenant_id = (SELECT analytics.analyst_tenant()));
