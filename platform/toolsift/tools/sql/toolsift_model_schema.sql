CREATE FUNCTION public.toolsift_model_schema(p_schema jsonb)
RETURNS jsonb
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN NOT (p_schema ?| ARRAY['oneOf', 'anyOf', 'allOf', 'enum', 'not']) THEN p_schema
        ELSE (p_schema - ARRAY['oneOf', 'anyOf', 'allOf', 'enum', 'not'])
             || CASE WHEN m.merged IS NULL THEN '{}'::jsonb
                     ELSE jsonb_build_object('properties', m.merged
                          || CASE WHEN jsonb_typeof(p_schema -> 'properties') = 'object'
                                  THEN p_schema -> 'properties' ELSE '{}'::jsonb END)
                END
    END
    FROM (
        -- The branches' properties, the first one named winning (jsonb keeps the last of
        -- a repeated key, so they are aggregated last to first); the top level's win over
        -- all of them.
        SELECT jsonb_object_agg(p.key, p.value ORDER BY c.o DESC, b.o DESC) AS merged
        FROM unnest(ARRAY['oneOf', 'anyOf', 'allOf']) WITH ORDINALITY AS c(keyword, o)
        CROSS JOIN LATERAL jsonb_array_elements(
            CASE WHEN jsonb_typeof(p_schema -> c.keyword) = 'array'
                 THEN p_schema -> c.keyword ELSE '[]'::jsonb END) WITH ORDINALITY AS b(branch, o)
        CROSS JOIN LATERAL jsonb_each(
            CASE WHEN jsonb_typeof(b.branch -> 'properties') = 'object'
                 THEN b.branch -> 'properties' ELSE '{}'::jsonb END) AS p
    ) m
$$
