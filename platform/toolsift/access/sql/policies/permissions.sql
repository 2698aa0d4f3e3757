CREATE POLICY tenant_isolation ON public.permissions
USING (tenant_id = NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid)
WITH CHECK (tenant_id = NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid);
