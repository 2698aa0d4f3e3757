CREATE POLICY tenant_isolation ON public.tool_calls
USING (tenant_id = NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid)
WITH CHECK (tenant_id = NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid);

CREATE POLICY analyst_read ON public.tool_calls
FOR SELECT TO toolsift_analyst USING (tenant_id = (SELECT analytics.analyst_tenant()));

CREATE POLICY analyst_pin ON public.tool_calls
AS RESTRICTIVE FOR SELECT TO toolsift_analyst USING (tenant_id = (SELECT analytics.analyst_tenant()));
