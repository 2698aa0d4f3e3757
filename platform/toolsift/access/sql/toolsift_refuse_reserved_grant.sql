CREATE FUNCTION public.toolsift_refuse_reserved_grant()
RETURNS trigger
LANGUAGE plpgsql
AS $$
        BEGIN
            IF EXISTS (SELECT 1 FROM permissions p WHERE p.tenant_id = NEW.tenant_id
                       AND p.id = NEW.permission_id AND p.name = 'mcp.review') THEN
                RAISE EXCEPTION 'permission mcp.review is reserved and cannot be granted'
                    USING ERRCODE = 'check_violation';
            END IF;
            RETURN NEW;
        END
        $$
