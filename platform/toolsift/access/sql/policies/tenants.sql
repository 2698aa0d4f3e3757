CREATE POLICY tenant_isolation ON public.tenants
USING (id = NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid)
WITH CHECK (id = NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid);

CREATE POLICY maintenance_read ON public.tenants
FOR SELECT TO toolsift_maintenance USING (true);

CREATE POLICY observer_count ON public.tenants
FOR SELECT TO toolsift_observer USING (true);
