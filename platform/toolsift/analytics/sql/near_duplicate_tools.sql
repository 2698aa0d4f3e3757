-- Pairs so close that they split scores: vectors of the same model at cosine >= 0.9, or
-- names (camelCase split, lower case) at trigram similarity >= 0.6.
CREATE VIEW analytics.near_duplicate_tools WITH (security_invoker = true) AS
WITH live AS (
    SELECT t.tenant_id, t.id, t.name,
           lower(regexp_replace(t.name, '([a-z0-9])([A-Z])', '\1_\2', 'g')) AS words
    FROM public.tools t WHERE t.deleted_at IS NULL
), close_vectors AS (
    -- Distances computed in the scan and filtered at once: a join that carried the
    -- vectors along would spill every pair's 2 x 1.5 kB to disk.
    SELECT ea.tool_id AS tool_a, eb.tool_id AS tool_b
    FROM public.tool_embeddings ea
    JOIN public.tool_embeddings eb ON eb.tenant_id = ea.tenant_id AND eb.model = ea.model
         AND ea.tool_id < eb.tool_id
    WHERE 1 - (ea.embedding <=> eb.embedding) >= 0.9
), close_names AS (
    SELECT a.id AS tool_a, b.id AS tool_b
    FROM live a JOIN live b ON b.tenant_id = a.tenant_id AND a.id < b.id
    WHERE public.similarity(a.words, b.words) >= 0.6
), candidates AS (
    SELECT tool_a, tool_b FROM close_vectors UNION SELECT tool_a, tool_b FROM close_names
), measured AS (
    SELECT a.id AS tool_a, a.name AS name_a, b.id AS tool_b, b.name AS name_b,
           v.model, v.cosine_similarity,
           public.similarity(a.words, b.words)::double precision AS name_similarity
    FROM candidates c
    JOIN live a ON a.id = c.tool_a
    JOIN live b ON b.id = c.tool_b AND b.tenant_id = a.tenant_id
    LEFT JOIN LATERAL (
        SELECT ea.model, 1 - (ea.embedding <=> eb.embedding) AS cosine_similarity
        FROM public.tool_embeddings ea
        JOIN public.tool_embeddings eb ON eb.tenant_id = ea.tenant_id
             AND eb.model = ea.model AND eb.tool_id = b.id
        WHERE ea.tenant_id = a.tenant_id AND ea.tool_id = a.id
    ) v ON true
)
SELECT * FROM measured WHERE cosine_similarity >= 0.9 OR name_similarity >= 0.6
