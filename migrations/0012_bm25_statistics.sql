-- Corpus statistics for BM25 keyword ranking, per organisation: how many memories contain each lexeme, and how
-- many memories (and lexemes in total) there are. Kept current by statement-level triggers, so a bulk load
-- updates them once per statement. Every memory row counts, whatever its status.
CREATE TABLE memory_term_stats (
    organization_id uuid NOT NULL,
    lexeme          text NOT NULL,
    doc_count       bigint NOT NULL,
    PRIMARY KEY (organization_id, lexeme)
);

CREATE TABLE memory_corpus_stats (
    organization_id uuid NOT NULL,
    doc_count       bigint NOT NULL,
    total_length    bigint NOT NULL,
    PRIMARY KEY (organization_id)
);

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['memory_term_stats', 'memory_corpus_stats']
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (organization_id = app_current_org()) '
                       'WITH CHECK (organization_id = app_current_org())', t);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %I TO memory_app', t);
    END LOOP;
END
$$;

-- Statement-level triggers: the transition table of an INSERT is added, that of a DELETE removed, and an UPDATE
-- removes its old rows and adds its new ones (transition tables cannot be limited to a column list).
CREATE FUNCTION memory_stats_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_corpus_stats AS s (organization_id, doc_count, total_length)
    SELECT organization_id, count(*), coalesce(sum(length(content_tsv)), 0) FROM new_rows GROUP BY organization_id
    ON CONFLICT (organization_id) DO UPDATE
        SET doc_count = s.doc_count + EXCLUDED.doc_count, total_length = s.total_length + EXCLUDED.total_length;
    INSERT INTO memory_term_stats AS s (organization_id, lexeme, doc_count)
    SELECT r.organization_id, u.lexeme, count(*) FROM new_rows r, unnest(r.content_tsv) u GROUP BY 1, 2
    ON CONFLICT (organization_id, lexeme) DO UPDATE SET doc_count = s.doc_count + EXCLUDED.doc_count;
    RETURN NULL;
END
$$;

CREATE FUNCTION memory_stats_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE memory_corpus_stats s
    SET doc_count = s.doc_count - o.n, total_length = s.total_length - o.len
    FROM (SELECT organization_id, count(*) AS n, coalesce(sum(length(content_tsv)), 0) AS len
          FROM old_rows GROUP BY organization_id) o
    WHERE s.organization_id = o.organization_id;
    UPDATE memory_term_stats s
    SET doc_count = s.doc_count - o.n
    FROM (SELECT r.organization_id, u.lexeme, count(*) AS n FROM old_rows r, unnest(r.content_tsv) u GROUP BY 1, 2) o
    WHERE s.organization_id = o.organization_id AND s.lexeme = o.lexeme;
    RETURN NULL;
END
$$;

CREATE TRIGGER memory_stats_insert AFTER INSERT ON memory
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_stats_add();
CREATE TRIGGER memory_stats_delete AFTER DELETE ON memory
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_stats_remove();
CREATE TRIGGER memory_stats_update_old AFTER UPDATE ON memory
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_stats_remove();
CREATE TRIGGER memory_stats_update_new AFTER UPDATE ON memory
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_stats_add();

-- Memories written before this migration.
INSERT INTO memory_corpus_stats (organization_id, doc_count, total_length)
SELECT organization_id, count(*), coalesce(sum(length(content_tsv)), 0) FROM memory GROUP BY organization_id;
INSERT INTO memory_term_stats (organization_id, lexeme, doc_count)
SELECT m.organization_id, u.lexeme, count(*) FROM memory m, unnest(m.content_tsv) u GROUP BY 1, 2;
