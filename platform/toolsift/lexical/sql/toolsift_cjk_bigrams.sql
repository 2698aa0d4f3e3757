-- Chinese, Japanese and Korean text as overlapping pairs of characters, each pair a word
-- ("查询天气预报" -> "查询 询天 天气 气预 预报"), as Lucene's CJK analyser indexes it: the
-- text search parser keeps a run of these characters, often a whole sentence, as one word,
-- which only that same run matches. Their punctuation ("。", "，", "「") separates words.
-- Text without either comes back as it was.
-- Letters: Hangul Jamo, Hiragana and Katakana, Hangul compatibility Jamo, CJK ideographs
-- (extension A, unified, compatibility), Hangul syllables, half-width Katakana.
-- Punctuation: CJK symbols and punctuation, full-width punctuation.
-- PL/pgSQL, not SQL: a session keeps its plans, where a SQL function's body (not inlined,
-- for its subquery) is planned in every statement (docs/benchmarks.md, "What reading CJK
-- as pairs costs a select").
CREATE FUNCTION public.toolsift_cjk_bigrams(p_text text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    -- Ranges of a regular expression's bracket expression.
    letters CONSTANT text := '\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f';
    punctuation CONSTANT text := '\u3000-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65';
BEGIN
    IF p_text !~ ('[' || letters || punctuation || ']') THEN
        RETURN p_text;
    END IF;
    RETURN (
        SELECT string_agg(
                   CASE WHEN char_length(m.part[1]) = 1 OR m.part[1] !~ ('^[' || letters || ']')
                        THEN m.part[1]
                        -- Each character with the next, in one pass: substr(run, i, 2)
                        -- walks the run from its start for every i, quadratic in its length.
                        ELSE (SELECT string_agg(c.pair, ' ' ORDER BY c.n)
                              FROM (SELECT s.ch || lead(s.ch) OVER (ORDER BY s.n) AS pair, s.n
                                    FROM regexp_split_to_table(m.part[1], '')
                                         WITH ORDINALITY AS s(ch, n)) AS c
                              WHERE c.pair IS NOT NULL)
                   END,
                   ' ' ORDER BY m.n)
        FROM regexp_matches(
                 regexp_replace(p_text, '[' || punctuation || ']', ' ', 'g'),
                 '[' || letters || ']+|[^' || letters || ']+',
                 'g'
             ) WITH ORDINALITY AS m(part, n)
    );
END
$$
