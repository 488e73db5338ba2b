-- Keyword postings: one row per (memory, lexeme) with the term frequency and the memory's length, so BM25 is
-- computed from a narrow index (index-only scans) instead of fetching and unnesting every matching tsvector.
-- The second index orders a lexeme's postings by impact (high tf, short memory first), so a very common term can
-- be read up to a cap instead of in full. Kept current by statement-level triggers like the BM25 statistics;
-- an UPDATE touches postings only of memories whose text changed.
CREATE TABLE memory_posting (
    organization_id uuid NOT NULL,
    memory_id       uuid NOT NULL,
    lexeme          text NOT NULL,
    tf              integer NOT NULL,
    doc_length      integer NOT NULL,
    PRIMARY KEY (organization_id, memory_id, lexeme)
);
CREATE INDEX memory_posting_impact ON memory_posting (organization_id, lexeme, tf DESC, doc_length, memory_id);

ALTER TABLE memory_posting ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_posting FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memory_posting USING (organization_id = app_current_org())
    WITH CHECK (organization_id = app_current_org());
GRANT SELECT, INSERT, DELETE ON memory_posting TO memory_app;

CREATE FUNCTION memory_postings_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_posting (organization_id, memory_id, lexeme, tf, doc_length)
    SELECT r.organization_id, r.id, u.lexeme, greatest(cardinality(u.positions), 1), length(r.content_tsv)
    FROM new_rows r, unnest(r.content_tsv) u;
    RETURN NULL;
END
$$;

CREATE FUNCTION memory_postings_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM memory_posting p USING old_rows r
    WHERE p.organization_id = r.organization_id AND p.memory_id = r.id;
    RETURN NULL;
END
$$;

CREATE FUNCTION memory_postings_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM memory_posting p USING old_rows o JOIN new_rows n ON n.organization_id = o.organization_id AND n.id = o.id
    WHERE p.organization_id = o.organization_id AND p.memory_id = o.id
      AND n.content_tsv IS DISTINCT FROM o.content_tsv;
    INSERT INTO memory_posting (organization_id, memory_id, lexeme, tf, doc_length)
    SELECT n.organization_id, n.id, u.lexeme, greatest(cardinality(u.positions), 1), length(n.content_tsv)
    FROM new_rows n JOIN old_rows o ON o.organization_id = n.organization_id AND o.id = n.id, unnest(n.content_tsv) u
    WHERE n.content_tsv IS DISTINCT FROM o.content_tsv;
    RETURN NULL;
END
$$;

CREATE TRIGGER memory_postings_insert AFTER INSERT ON memory
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_postings_add();
CREATE TRIGGER memory_postings_delete AFTER DELETE ON memory
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_postings_remove();
CREATE TRIGGER memory_postings_update AFTER UPDATE ON memory
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_postings_change();

-- Memories written before this migration.
INSERT INTO memory_posting (organization_id, memory_id, lexeme, tf, doc_length)
SELECT m.organization_id, m.id, u.lexeme, greatest(cardinality(u.positions), 1), length(m.content_tsv)
FROM memory m, unnest(m.content_tsv) u;

-- The keyword branch's match condition: websearch syntax with its terms and phrases OR-ed (a turn's text rarely
-- contains every word of a memory) and its -exclusions AND-ed (an excluded word excludes whatever else matches).
CREATE FUNCTION memory_keyword_tsquery(config regconfig, query text) RETURNS tsquery LANGUAGE sql STABLE AS $$
    SELECT concat_ws(' & ', '(' || string_agg(part, ' | ') FILTER (WHERE left(part, 1) <> '!') || ')',
                            string_agg(part, ' & ') FILTER (WHERE left(part, 1) = '!'))::tsquery
    FROM regexp_split_to_table(websearch_to_tsquery(config, query)::text, ' [&|] ') AS part
    WHERE part <> ''
$$;

-- The lexemes a keyword query scores with: those of its terms and phrases, not of its -exclusions.
CREATE FUNCTION memory_keyword_terms(config regconfig, query text) RETURNS SETOF text LANGUAGE sql STABLE AS $$
    SELECT DISTINCT replace(m[1], '''''', '''')
    FROM regexp_split_to_table(websearch_to_tsquery(config, query)::text, ' [&|] ') AS part,
         regexp_matches(part, '''((?:[^'']|'''')*)''', 'g') AS m
    WHERE left(part, 1) <> '!'
$$;

-- The keyword branch no longer searches the tsvector index (it only re-checks phrases and exclusions on the few
-- memories it ranks), so the index is not worth its write cost.
DROP INDEX memory_content_tsv;
