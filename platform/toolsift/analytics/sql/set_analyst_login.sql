CREATE FUNCTION analytics.set_analyst_login(verifier text)
RETURNS text
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
    IF verifier IS NULL OR verifier !~ '^SCRAM-SHA-256\$' THEN
        RAISE EXCEPTION 'a SCRAM-SHA-256 verifier is required' USING ERRCODE = '22023';
    END IF;
    login := 'toolsift_analyst_' || replace(tenant::text, '-', '');
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = login) THEN
        EXECUTE format('ALTER ROLE %I PASSWORD %L', login, verifier);
    ELSE
        EXECUTE format('CREATE ROLE %I LOGIN INHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE'
                       ' NOBYPASSRLS NOREPLICATION CONNECTION LIMIT 5 PASSWORD %L IN ROLE toolsift_analyst',
                       login, verifier);
        EXECUTE format('ALTER ROLE %I SET default_transaction_read_only = on', login);
        EXECUTE format('ALTER ROLE %I SET search_path = analytics, public', login);
        -- The tenant is pinned by the analyst policies; within it the whole catalog counts.
        -- Only a superuser may store a custom setting on a role; otherwise the analyst passes
        -- it when connecting (options=-c app.permissions=*), as the API answer says.
        BEGIN
            EXECUTE format('ALTER ROLE %I SET app.permissions = %L', login, '*');
        EXCEPTION WHEN insufficient_privilege THEN
            NULL;
        END;
    END IF;
    EXECUTE format('ALTER ROLE %I SET statement_timeout = %L', login, '60s');
    RETURN login;
END
$$
