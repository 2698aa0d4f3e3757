-- A tenant's numeric setting, checked against its range: a bad value falls back to the
-- default instead of failing every select of the tenant.
CREATE FUNCTION public.toolsift_setting(
    p_settings jsonb,
    p_name text,
    p_low double precision,
    p_closed boolean,
    p_high double precision,
    p_default double precision
)
RETURNS double precision
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    raw jsonb := CASE WHEN jsonb_typeof(p_settings) = 'object' THEN p_settings -> p_name END;
    value float8;
BEGIN
    IF raw IS NULL OR jsonb_typeof(raw) <> 'number' THEN
        RETURN p_default;
    END IF;
    BEGIN
        value := (raw #>> '{}')::float8;
    EXCEPTION WHEN numeric_value_out_of_range THEN
        RETURN p_default;  -- beyond a double: not finite, as Python reads it
    END;
    IF (CASE WHEN p_closed THEN value >= p_low ELSE value > p_low END) AND value <= p_high THEN
        RETURN value;
    END IF;
    RETURN p_default;
END
$$
