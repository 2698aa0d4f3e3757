CREATE POLICY tenant_isolation ON public.corpus_stats
USING (tenant_id = NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid)
WITH CHECK (tenant_id = NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid);

CREATE POLICY tool_permission ON public.corpus_stats
AS RESTRICTIVE
USING (
    permission_key = '00000000-0000-0000-0000-000000000000'::uuid
    OR (SELECT current_setting('app.permissions', true)) = '*'
    OR permission_key = ANY ((
        SELECT string_to_array(NULLIF(current_setting('app.permissions', true), '*'), ',')::uuid[]
    )::uuid[])
)
WITH CHECK (
    permission_key = '00000000-0000-0000-0000-000000000000'::uuid
    OR (SELECT current_setting('app.permissions', true)) = '*'
    OR permission_key = ANY ((
        SELECT string_to_array(NULLIF(current_setting('app.permissions', true), '*'), ',')::uuid[]
    )::uuid[])
);
