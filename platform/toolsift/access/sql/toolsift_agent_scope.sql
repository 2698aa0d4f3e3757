CREATE FUNCTION public.toolsift_agent_scope(
    p_tenant uuid,
    p_key uuid,
    p_key_hash text,
    p_roles text[]
)
RETURNS text[]
LANGUAGE plpgsql
AS $$
DECLARE
    found_key record;
    acting text[];
BEGIN
    -- The role first: whatever login calls, everything below runs bound by RLS.
    PERFORM set_config('role', 'toolsift_app', true),
            set_config('app.tenant_id', p_tenant::text, true),
            set_config('app.permissions', '', true);
    SELECT k.key_hash, k.scope, k.revoked_at IS NOT NULL AS revoked,
           coalesce(array_agg(r.name ORDER BY r.name) FILTER (WHERE r.name IS NOT NULL),
                    '{}') AS roles
      INTO found_key
      FROM public.api_keys k
      LEFT JOIN public.api_key_roles kr ON kr.tenant_id = k.tenant_id AND kr.key_id = k.id
      LEFT JOIN public.roles r ON r.tenant_id = kr.tenant_id AND r.id = kr.role_id
     WHERE k.tenant_id = p_tenant AND k.id = p_key
     GROUP BY k.key_hash, k.scope, k.revoked_at;
    -- One message for unknown, wrong and revoked keys: nothing to probe.
    IF NOT FOUND OR found_key.revoked OR found_key.key_hash <> p_key_hash THEN
        RAISE EXCEPTION 'invalid or revoked API key' USING ERRCODE = 'TSA01';
    END IF;
    IF found_key.scope <> 'agent' THEN
        RAISE EXCEPTION 'this endpoint needs an agent key' USING ERRCODE = 'TSA03';
    END IF;
    -- Roles asserted but not granted add nothing here; the caller refuses them by name.
    acting := CASE WHEN p_roles IS NULL THEN found_key.roles
                   ELSE ARRAY(SELECT unnest(p_roles) INTERSECT SELECT unnest(found_key.roles))
              END;
    PERFORM set_config(
        'app.permissions',
        coalesce((
            SELECT string_agg(DISTINCT rp.permission_id::text, ',')
              FROM public.role_permissions rp
              JOIN public.roles r ON r.tenant_id = rp.tenant_id AND r.id = rp.role_id
             WHERE r.tenant_id = p_tenant AND r.name = ANY (acting)
        ), ''),
        true);
    RETURN found_key.roles;
END
$$
