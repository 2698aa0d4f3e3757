CREATE FUNCTION analytics.retention_days(settings jsonb, default_days integer)
RETURNS integer
LANGUAGE sql
IMMUTABLE
SET search_path TO 'pg_catalog'
AS $$
    SELECT CASE WHEN jsonb_typeof(settings -> 'log_retention_days') = 'number'
                 AND (settings ->> 'log_retention_days') ~ '^[0-9]{1,5}$'
                 AND (settings ->> 'log_retention_days')::integer >= 1
                THEN (settings ->> 'log_retention_days')::integer
                ELSE default_days END
$$
