-- BM25 statistics in shards. A writer claims a shard of its organisation's corpus statistics that no other
-- transaction holds (FOR UPDATE SKIP LOCKED), or opens a new one when all are busy, and adds its changes to that
-- shard's rows only, so concurrent writers of one organisation never queue on the same statistics rows; readers
-- sum the shards. A shard's counts may go negative (a memory counted in one shard and removed in another); only
-- the sums mean anything. Shards are as many as the most writers an organisation ever had at once.
ALTER TABLE memory_corpus_stats ADD COLUMN shard smallint NOT NULL DEFAULT 0;
ALTER TABLE memory_corpus_stats DROP CONSTRAINT memory_corpus_stats_pkey;
ALTER TABLE memory_corpus_stats ADD PRIMARY KEY (organization_id, shard);
ALTER TABLE memory_term_stats ADD COLUMN shard smallint NOT NULL DEFAULT 0;
ALTER TABLE memory_term_stats DROP CONSTRAINT memory_term_stats_pkey;
ALTER TABLE memory_term_stats ADD PRIMARY KEY (organization_id, lexeme, shard);

-- The shard of the organisation's statistics this transaction writes to: one that no other transaction holds,
-- locked for the rest of the transaction (the lock on the corpus row also reserves the organisation's term rows
-- of that shard), or, when all are busy, a new number past them (with a random gap so that writers opening shards
-- at the same moment rarely pick the same one); the caller's INSERT creates and so locks it.
CREATE FUNCTION memory_stats_claim_shard(org uuid) RETURNS smallint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    s integer;
BEGIN
    SELECT shard INTO s FROM memory_corpus_stats WHERE organization_id = org
    ORDER BY shard LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        RETURN s;
    END IF;
    s := coalesce((SELECT max(shard) FROM memory_corpus_stats WHERE organization_id = org), -1)
         + 1 + floor(random() * 8)::integer;
    RETURN CASE WHEN s > 32000 THEN floor(random() * 32000)::integer ELSE s END;
END
$$;

-- Each trigger claims one shard per organisation of its statement, then adds the statement's documents and
-- lexemes (inserted: +, deleted: -, text changed: both) to it.
CREATE OR REPLACE FUNCTION memory_stats_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH shards AS MATERIALIZED (
        SELECT o AS organization_id, memory_stats_claim_shard(o) AS shard
        FROM (SELECT DISTINCT organization_id AS o FROM new_rows ORDER BY 1) d
    ), corpus AS (
        INSERT INTO memory_corpus_stats AS c (organization_id, shard, doc_count, total_length)
        SELECT r.organization_id, h.shard, count(*), coalesce(sum(length(r.content_tsv)), 0)
        FROM new_rows r JOIN shards h USING (organization_id) GROUP BY 1, 2
        ON CONFLICT (organization_id, shard) DO UPDATE
            SET doc_count = c.doc_count + EXCLUDED.doc_count, total_length = c.total_length + EXCLUDED.total_length
    )
    INSERT INTO memory_term_stats AS t (organization_id, lexeme, shard, doc_count)
    SELECT r.organization_id, u.lexeme, h.shard, count(*)
    FROM new_rows r JOIN shards h USING (organization_id), unnest(r.content_tsv) u GROUP BY 1, 2, 3
    ON CONFLICT (organization_id, lexeme, shard) DO UPDATE SET doc_count = t.doc_count + EXCLUDED.doc_count;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION memory_stats_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH shards AS MATERIALIZED (
        SELECT o AS organization_id, memory_stats_claim_shard(o) AS shard
        FROM (SELECT DISTINCT organization_id AS o FROM old_rows ORDER BY 1) d
    ), corpus AS (
        INSERT INTO memory_corpus_stats AS c (organization_id, shard, doc_count, total_length)
        SELECT r.organization_id, h.shard, -count(*), -coalesce(sum(length(r.content_tsv)), 0)
        FROM old_rows r JOIN shards h USING (organization_id) GROUP BY 1, 2
        ON CONFLICT (organization_id, shard) DO UPDATE
            SET doc_count = c.doc_count + EXCLUDED.doc_count, total_length = c.total_length + EXCLUDED.total_length
    )
    INSERT INTO memory_term_stats AS t (organization_id, lexeme, shard, doc_count)
    SELECT r.organization_id, u.lexeme, h.shard, -count(*)
    FROM old_rows r JOIN shards h USING (organization_id), unnest(r.content_tsv) u GROUP BY 1, 2, 3
    ON CONFLICT (organization_id, lexeme, shard) DO UPDATE SET doc_count = t.doc_count + EXCLUDED.doc_count;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION memory_stats_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM old_rows o JOIN new_rows n ON n.organization_id = o.organization_id AND n.id = o.id
                   WHERE n.content_tsv IS DISTINCT FROM o.content_tsv) THEN
        RETURN NULL;
    END IF;
    WITH changed AS MATERIALIZED (
        SELECT o.organization_id, -1 AS sign, o.content_tsv FROM old_rows o JOIN new_rows n USING (organization_id, id)
        WHERE n.content_tsv IS DISTINCT FROM o.content_tsv
        UNION ALL
        SELECT n.organization_id, 1, n.content_tsv FROM new_rows n JOIN old_rows o USING (organization_id, id)
        WHERE n.content_tsv IS DISTINCT FROM o.content_tsv
    ), shards AS MATERIALIZED (
        SELECT o AS organization_id, memory_stats_claim_shard(o) AS shard
        FROM (SELECT DISTINCT organization_id AS o FROM changed ORDER BY 1) d
    ), corpus AS (
        INSERT INTO memory_corpus_stats AS c (organization_id, shard, doc_count, total_length)
        SELECT c.organization_id, h.shard, 0, sum(c.sign * length(c.content_tsv))
        FROM changed c JOIN shards h USING (organization_id) GROUP BY 1, 2
        ON CONFLICT (organization_id, shard) DO UPDATE SET total_length = c.total_length + EXCLUDED.total_length
    )
    INSERT INTO memory_term_stats AS t (organization_id, lexeme, shard, doc_count)
    SELECT c.organization_id, u.lexeme, h.shard, sum(c.sign)
    FROM changed c JOIN shards h USING (organization_id), unnest(c.content_tsv) u GROUP BY 1, 2, 3
    ON CONFLICT (organization_id, lexeme, shard) DO UPDATE SET doc_count = t.doc_count + EXCLUDED.doc_count;
    RETURN NULL;
END
$$;

-- One organisation's totals, as the keyword branch and the ANN maintenance read them.
CREATE VIEW memory_corpus_totals WITH (security_invoker = true) AS
    SELECT organization_id, sum(doc_count)::bigint AS doc_count, sum(total_length)::bigint AS total_length
    FROM memory_corpus_stats GROUP BY organization_id;
GRANT SELECT ON memory_corpus_totals TO memory_app;
