CREATE POLICY tenant_isolation ON public.outbox
USING (tenant_id = NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid)
WITH CHECK (tenant_id = NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid);

CREATE POLICY relay_read ON public.outbox
FOR SELECT USING ((SELECT current_setting('app.relay', true)) = 'on');

CREATE POLICY relay_claim ON public.outbox
FOR UPDATE USING ((SELECT current_setting('app.relay', true)) = 'on') WITH CHECK ((SELECT current_setting('app.relay', true)) = 'on');

CREATE POLICY observer_count ON public.outbox
FOR SELECT TO toolsift_observer USING (true);
