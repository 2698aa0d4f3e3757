CREATE POLICY tenant_isolation ON public.mcp_sources
USING (tenant_id = NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid)
WITH CHECK (tenant_id = NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid);

CREATE POLICY scheduler_read ON public.mcp_sources
FOR SELECT USING ((SELECT current_setting('app.scheduler', true)) = 'on');

CREATE POLICY observer_count ON public.mcp_sources
FOR SELECT TO toolsift_observer USING (true);
