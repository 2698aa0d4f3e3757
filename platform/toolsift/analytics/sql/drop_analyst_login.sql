CREATE FUNCTION analytics.drop_analyst_login()
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
DECLARE
    tenant uuid := NULLIF(current_setting('app.tenant_id', true), '')::uuid;
    login text;
BEGIN
    IF tenant IS NULL THEN
        RAISE EXCEPTION 'no tenant in this transaction' USING ERRCODE = '42501';
    END IF;
    login := 'toolsift_analyst_' || replace(tenant::text, '-', '');
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = login) THEN
        RETURN false;
    END IF;
    EXECUTE format('DROP ROLE %I', login);
    RETURN true;
END
$$
