CREATE FUNCTION public.toolsift_schema_revision()
RETURNS text
LANGUAGE sql
STABLE SECURITY DEFINER
SET search_path TO 'public', 'pg_temp'
AS $$ SELECT version_num FROM alembic_version LIMIT 1 $$
