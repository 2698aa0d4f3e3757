CREATE FUNCTION public.toolsift_apply_roles(p_tenant uuid, p_roles text[])
RETURNS text
LANGUAGE sql
AS $$
    SELECT set_config(
        'app.permissions',
        coalesce(string_agg(DISTINCT rp.permission_id::text, ','), ''),
        true)
      FROM public.role_permissions rp
      JOIN public.roles r ON r.tenant_id = rp.tenant_id AND r.id = rp.role_id
     WHERE r.tenant_id = p_tenant AND r.name = ANY (p_roles)
$$
