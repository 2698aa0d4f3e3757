CREATE FUNCTION public.toolsift_definition(
    p_name text,
    p_title text,
    p_description text,
    p_input json,
    p_output json,
    p_annotations json,
    p_format text
)
RETURNS text
LANGUAGE sql
STABLE PARALLEL SAFE
AS $$
    SELECT CASE p_format
        WHEN 'anthropic' THEN json_build_object(
            'name', p_name, 'description', p_description,
            'input_schema', toolsift_served_schema(p_input))::text
        WHEN 'anthropic_tool_reference' THEN json_build_object(
            'type', 'tool_reference', 'tool_name', p_name)::text
        WHEN 'openai' THEN json_build_object(
            'type', 'function', 'function', json_build_object(
                'name', p_name,
                'description', CASE WHEN char_length(p_description) > 1024
                                    THEN left(p_description, 1023) || U&'\2026'
                                    ELSE p_description END,
                'parameters', toolsift_served_schema(p_input)))::text
        WHEN 'openai_responses' THEN json_build_object(
            'type', 'function', 'name', p_name,
            'description', CASE WHEN char_length(p_description) > 1024
                                THEN left(p_description, 1023) || U&'\2026'
                                ELSE p_description END,
            'parameters', toolsift_served_schema(p_input),
            'strict', false)::text
        ELSE '{"name":' || to_json(p_name)::text
            || CASE WHEN coalesce(p_title, '') <> ''
                    THEN ',"title":' || to_json(p_title)::text ELSE '' END
            || ',"description":' || to_json(p_description)::text
            || ',"inputSchema":' || p_input::text
            -- A JSON null is no schema, as an SQL NULL is.
            || CASE WHEN json_typeof(p_output) <> 'null'
                    THEN ',"outputSchema":' || p_output::text ELSE '' END
            || CASE WHEN json_typeof(p_annotations) <> 'null'
                    THEN ',"annotations":' || p_annotations::text ELSE '' END
            || '}'
    END
$$
