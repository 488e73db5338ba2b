-- Memories anchored in a repository. `repository` names it and `language` is its file's; `anchor` places a chunk
-- in its file: {"symbol": the symbol path or heading breadcrumb, unique in the file, "hash": the chunk's own hash
-- at the last scan, "start_line", "end_line"}.
ALTER TABLE memory
    ADD COLUMN repository text CHECK (repository IS NULL OR length(repository) <= 200),
    ADD COLUMN language text CHECK (language IS NULL OR length(language) <= 32),
    ADD COLUMN anchor jsonb CHECK (anchor IS NULL OR (file_path IS NOT NULL AND jsonb_typeof(anchor) = 'object'));
CREATE INDEX memory_anchored ON memory (organization_id, project_id, file_path)
    WHERE anchor IS NOT NULL AND status = 'active';
-- The file scan's pages: an organisation's files in (project, path) order, paths by their bytes.
CREATE INDEX memory_file_pages ON memory (organization_id, project_id, (file_path COLLATE "C"))
    WHERE file_backed AND status = 'active';

-- Code words: identifiers split the way engineers type them, so `parseConfig`, `parse_config` and `ParseConfig`
-- share their words and their joined form (`parseconfig`), and a path or dotted name (`src/auth/login.rs`,
-- `Server.handle`) is also its parts. Only words with a camel hump, an inner `_`, or a `.`, `/` or `:` between
-- letters produce any (the text search parser itself splits `_` and `-`, keeping only the parts).
CREATE FUNCTION memory_code_words(t text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(string_agg(concat_ws(' ',
        CASE WHEN w ~ '[a-z0-9][A-Z]|[A-Z][A-Z][a-z]|[[:alpha:]][./:]+[[:alpha:]]' THEN regexp_replace(
            regexp_replace(regexp_replace(w, '([a-z0-9])([A-Z])', '\1 \2', 'g'), '([A-Z]+)([A-Z][a-z])', '\1 \2', 'g'),
            '[^[:alnum:]]+', ' ', 'g') END,
        CASE WHEN w ~ '[[:alnum:]]_+[[:alnum:]]' THEN replace(w, '_', '') END), ' '), '')
    FROM regexp_split_to_table(t, '\s+') AS w
    WHERE w ~ '[a-z0-9][A-Z]|[A-Z][A-Z][a-z]|[[:alpha:]][./:]+[[:alpha:]]|[[:alnum:]]_+[[:alnum:]]'
$$;

ALTER TABLE memory DROP COLUMN content_tsv;
ALTER TABLE memory ADD COLUMN content_tsv tsvector GENERATED ALWAYS AS (to_tsvector('memory_text',
    content || coalesce(' ' || context, '') || ' ' || memory_code_words(content || coalesce(' ' || context, '')))) STORED;

-- A query's terms and its match condition get the same code words.
CREATE OR REPLACE FUNCTION memory_keyword_tsquery(config regconfig, query text) RETURNS tsquery LANGUAGE sql STABLE AS $$
    SELECT concat_ws(' & ', '(' || string_agg(part, ' | ') FILTER (WHERE left(part, 1) <> '!') || ')',
                            string_agg(part, ' & ') FILTER (WHERE left(part, 1) = '!'))::tsquery
    FROM regexp_split_to_table(websearch_to_tsquery(config, query || ' ' || memory_code_words(query))::text, ' [&|] ') AS part
    WHERE part <> ''
$$;
CREATE OR REPLACE FUNCTION memory_keyword_terms(config regconfig, query text) RETURNS SETOF text LANGUAGE sql STABLE AS $$
    SELECT DISTINCT replace(m[1], '''''', '''')
    FROM regexp_split_to_table(websearch_to_tsquery(config, query || ' ' || memory_code_words(query))::text, ' [&|] ') AS part,
         regexp_matches(part, '''((?:[^'']|'''')*)''', 'g') AS m
    WHERE left(part, 1) <> '!'
$$;

-- The keyword statistics and postings of the memories written before, from their new vectors.
DELETE FROM memory_posting;
INSERT INTO memory_posting (organization_id, memory_id, lexeme, tf, doc_length)
SELECT m.organization_id, m.id, u.lexeme, greatest(cardinality(u.positions), 1), length(m.content_tsv)
FROM memory m, unnest(m.content_tsv) u;
DELETE FROM memory_term_stats;
DELETE FROM memory_corpus_stats;
INSERT INTO memory_corpus_stats (organization_id, shard, doc_count, total_length)
SELECT organization_id, 0, count(*), coalesce(sum(length(content_tsv)), 0) FROM memory GROUP BY organization_id;
INSERT INTO memory_term_stats (organization_id, lexeme, shard, doc_count)
SELECT m.organization_id, u.lexeme, 0, count(*) FROM memory m, unnest(m.content_tsv) u GROUP BY 1, 2;
