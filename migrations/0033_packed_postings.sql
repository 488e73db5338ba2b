-- Keyword postings packed whole, one value per (organisation, lexeme), so the keyword branch scores every posting
-- of its terms (exact BM25) for the cost of a few reads instead of one executor row per posting.
--
-- memory_posting stays the source of truth, kept by its triggers. A list holds the postings of its lexeme as of its
-- last packing; postings written since are `packed = false` (the tail, read row-wise beside the list), and a packed
-- posting deleted since leaves its memory id in memory_posting_gone until the lexeme is packed again
-- (store::keyword::pack, from the lifecycle sweep).
CREATE TABLE memory_posting_list (
    organization_id uuid NOT NULL,
    lexeme          text NOT NULL,
    -- 24 bytes a posting, ordered by memory id: the id (16 bytes), tf and doc_length (int4, big-endian).
    postings        bytea NOT NULL,
    PRIMARY KEY (organization_id, lexeme)
);
-- Stored uncompressed: ids do not compress, and a list is read whole on every query of its lexeme.
ALTER TABLE memory_posting_list ALTER COLUMN postings SET STORAGE EXTERNAL;

CREATE TABLE memory_posting_gone (
    organization_id uuid NOT NULL,
    lexeme          text NOT NULL,
    memory_id       uuid NOT NULL,
    PRIMARY KEY (organization_id, lexeme, memory_id)
);

-- The postings written before are packed below (this migration's table lock holds their writers meanwhile). The
-- packing reads every organisation's postings, so memory_posting stops forcing row-level security on its owner (this
-- migration's role, which on a managed database has no BYPASSRLS) until it is done: the postings marked packed must
-- all be in the lists.
ALTER TABLE memory_posting NO FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_posting ADD COLUMN packed boolean NOT NULL DEFAULT true;
ALTER TABLE memory_posting ALTER COLUMN packed SET DEFAULT false;
INSERT INTO memory_posting_list (organization_id, lexeme, postings)
SELECT organization_id, lexeme, string_agg(uuid_send(memory_id) || int4send(tf) || int4send(doc_length), ''::bytea
                                           ORDER BY memory_id)
FROM memory_posting GROUP BY organization_id, lexeme;
ALTER TABLE memory_posting FORCE ROW LEVEL SECURITY;
CREATE INDEX memory_posting_tail ON memory_posting (organization_id, lexeme) INCLUDE (memory_id, tf, doc_length)
    WHERE NOT packed;

ALTER TABLE memory_posting_list ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_posting_list FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memory_posting_list USING (organization_id = app_current_org())
    WITH CHECK (organization_id = app_current_org());
ALTER TABLE memory_posting_gone ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_posting_gone FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memory_posting_gone USING (organization_id = app_current_org())
    WITH CHECK (organization_id = app_current_org());
GRANT SELECT, INSERT, UPDATE ON memory_posting_list TO memory_app;
GRANT SELECT, INSERT, DELETE ON memory_posting_gone TO memory_app;
GRANT UPDATE (packed) ON memory_posting TO memory_app;

-- A deleted posting that a list holds is recorded as gone.
CREATE OR REPLACE FUNCTION memory_postings_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH removed AS (
        DELETE FROM memory_posting p USING old_rows r
        WHERE p.organization_id = r.organization_id AND p.memory_id = r.id
        RETURNING p.organization_id, p.lexeme, p.memory_id, p.packed)
    INSERT INTO memory_posting_gone (organization_id, lexeme, memory_id)
    SELECT organization_id, lexeme, memory_id FROM removed WHERE packed
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION memory_postings_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH removed AS (
        DELETE FROM memory_posting p
        USING old_rows o JOIN new_rows n ON n.organization_id = o.organization_id AND n.id = o.id
        WHERE p.organization_id = o.organization_id AND p.memory_id = o.id
          AND n.content_tsv IS DISTINCT FROM o.content_tsv
        RETURNING p.organization_id, p.lexeme, p.memory_id, p.packed)
    INSERT INTO memory_posting_gone (organization_id, lexeme, memory_id)
    SELECT organization_id, lexeme, memory_id FROM removed WHERE packed
    ON CONFLICT DO NOTHING;
    INSERT INTO memory_posting (organization_id, memory_id, lexeme, tf, doc_length)
    SELECT n.organization_id, n.id, u.lexeme, greatest(cardinality(u.positions), 1), length(n.content_tsv)
    FROM new_rows n JOIN old_rows o ON o.organization_id = n.organization_id AND o.id = n.id, unnest(n.content_tsv) u
    WHERE n.content_tsv IS DISTINCT FROM o.content_tsv;
    RETURN NULL;
END
$$;
