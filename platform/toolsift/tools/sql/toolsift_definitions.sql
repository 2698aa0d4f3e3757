CREATE FUNCTION public.toolsift_definitions(p_tenant uuid, p_ids uuid[], p_format text)
RETURNS text
LANGUAGE sql
STABLE PARALLEL SAFE
SET plan_cache_mode TO 'force_generic_plan'
AS $$
    SELECT string_agg(toolsift_definition(
               t.name, t.title, t.description, t.input_schema, t.output_schema, t.annotations,
               p_format), ',' ORDER BY array_position(p_ids, t.id))
      FROM public.tools t
     WHERE t.tenant_id = p_tenant AND t.id = ANY (p_ids)
$$
