CREATE FUNCTION analytics.analyst_tenant()
RETURNS uuid
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path TO 'pg_catalog'
AS $$
    SELECT CASE WHEN session_user::text ~ '^toolsift_analyst_[0-9a-f]{32}$'
                 AND pg_has_role(session_user, 'toolsift_analyst', 'MEMBER')
                THEN substr(session_user::text, 18)::uuid END
$$
