CREATE FUNCTION public.toolsift_served_schema(p_schema json)
RETURNS json
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN p_schema::jsonb ?| ARRAY['oneOf', 'anyOf', 'allOf', 'enum', 'not']
                THEN toolsift_model_schema(p_schema::jsonb)::json
                ELSE p_schema END
$$
