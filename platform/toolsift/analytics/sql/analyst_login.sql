CREATE FUNCTION analytics.analyst_login()
RETURNS text
LANGUAGE sql
STABLE SECURITY DEFINER
SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
    SELECT rolname::text FROM pg_roles
    WHERE rolname = 'toolsift_analyst_'
          || replace(NULLIF(current_setting('app.tenant_id', true), ''), '-', '')
$$
