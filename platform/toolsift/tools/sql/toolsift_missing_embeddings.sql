CREATE FUNCTION public.toolsift_missing_embeddings(p_tenant uuid, p_model text)
RETURNS integer
LANGUAGE sql
STABLE PARALLEL SAFE
SET plan_cache_mode TO 'force_generic_plan'
AS $$
    SELECT ((SELECT count(*) FROM public.tools t
              WHERE t.tenant_id = p_tenant AND t.deleted_at IS NULL)
          - (SELECT count(*) FROM public.tool_embeddings e
              WHERE e.tenant_id = p_tenant AND e.model = p_model))::integer
$$
