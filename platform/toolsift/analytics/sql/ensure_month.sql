CREATE FUNCTION analytics.ensure_month(for_month date)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path TO 'pg_catalog', 'public', 'pg_temp'
SET "TimeZone" TO 'UTC'
AS $$
DECLARE
    lo date := date_trunc('month', for_month)::date;
    hi date := (date_trunc('month', for_month) + interval '1 month')::date;
    suffix text := to_char(date_trunc('month', for_month), '"y"YYYY"m"MM');
    stranded boolean;
BEGIN
    IF to_regclass('public.selection_logs_' || suffix) IS NOT NULL THEN
        RETURN false;
    END IF;
    -- One maintainer at a time; selects keep inserting (ROW EXCLUSIVE does not conflict).
    LOCK TABLE selection_logs, tool_calls IN SHARE UPDATE EXCLUSIVE MODE;
    IF to_regclass('public.selection_logs_' || suffix) IS NOT NULL THEN
        RETURN false;
    END IF;
    -- Nothing may land in the default partitions between the check, the move and the new
    -- partition's own check of them (a select of a month that has no partition yet).
    LOCK TABLE tool_calls_default, selection_logs_default IN ACCESS EXCLUSIVE MODE;
    SELECT EXISTS (SELECT 1 FROM selection_logs_default WHERE created_at >= lo AND created_at < hi)
      INTO stranded;
    IF stranded THEN
        CREATE TEMP TABLE analytics_stranded_calls ON COMMIT DROP AS
            SELECT * FROM tool_calls_default
            WHERE selection_created_at >= lo AND selection_created_at < hi;
        CREATE TEMP TABLE analytics_stranded_logs ON COMMIT DROP AS
            SELECT * FROM selection_logs_default WHERE created_at >= lo AND created_at < hi;
        DELETE FROM tool_calls_default
        WHERE selection_created_at >= lo AND selection_created_at < hi;
        DELETE FROM selection_logs_default WHERE created_at >= lo AND created_at < hi;
    END IF;
    EXECUTE format('CREATE TABLE public.%I PARTITION OF public.selection_logs FOR VALUES FROM (%L) TO (%L)',
                   'selection_logs_' || suffix, lo, hi);
    EXECUTE format('CREATE TABLE public.%I PARTITION OF public.tool_calls FOR VALUES FROM (%L) TO (%L)',
                   'tool_calls_' || suffix, lo, hi);
    IF stranded THEN
        EXECUTE format('INSERT INTO public.%I SELECT * FROM pg_temp.analytics_stranded_logs',
                       'selection_logs_' || suffix);
        EXECUTE format('INSERT INTO public.%I SELECT * FROM pg_temp.analytics_stranded_calls',
                       'tool_calls_' || suffix);
        DROP TABLE pg_temp.analytics_stranded_calls, pg_temp.analytics_stranded_logs;
    END IF;
    RETURN true;
END
$$
