CREATE FUNCTION public.record_tool_version()
RETURNS trigger
LANGUAGE plpgsql
SET search_path TO 'pg_catalog', 'public'
AS $$
BEGIN
    INSERT INTO tool_versions (tenant_id, tool_id, version, description_md5, changed_at)
    VALUES (NEW.tenant_id, NEW.id, NEW.version, md5(NEW.description), now())
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$
