-- Keyword postings and BM25 statistics made to agree with the memories' text in every organisation.
--
-- Migrations 0012, 0014 and 0030 built them from `memory` while it forced row-level security. Run by an owner
-- without BYPASSRLS (a managed database's), they read no memories, so memories written before them lacked their
-- statistics (0012), their postings (0014) or their code words' postings (0030). Here each organisation's postings
-- and statistics are compared with what its memories' text gives, and only the differences are written, as the
-- memory triggers would write them: a missing or changed posting joins the tail (the lifecycle sweep packs it), a
-- packed posting removed is recorded gone, and the statistics' differences are added to shard 0. On a database
-- whose earlier migrations read every row, nothing changes.
--
-- It holds `memory` and the keyword tables while it reads every memory's text, so retrieval and writes wait for it:
-- run it when the service is quiet. It waits at most 10 s for their locks, then fails (and can be run again) rather
-- than queue the service behind it.
SET LOCAL lock_timeout = '10s';
ALTER TABLE memory NO FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_posting NO FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_posting_gone NO FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_term_stats NO FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_corpus_stats NO FORCE ROW LEVEL SECURITY;

CREATE TEMPORARY TABLE expected_posting ON COMMIT DROP AS
SELECT m.organization_id, m.id AS memory_id, u.lexeme, greatest(cardinality(u.positions), 1) AS tf,
       length(m.content_tsv) AS doc_length
FROM memory m, unnest(m.content_tsv) u;

WITH stale AS (
    SELECT organization_id, memory_id, lexeme, tf, doc_length FROM memory_posting
    EXCEPT
    SELECT organization_id, memory_id, lexeme, tf, doc_length FROM expected_posting),
removed AS (
    DELETE FROM memory_posting p USING stale s
    WHERE p.organization_id = s.organization_id AND p.memory_id = s.memory_id AND p.lexeme = s.lexeme
    RETURNING p.organization_id, p.lexeme, p.memory_id, p.packed)
INSERT INTO memory_posting_gone (organization_id, lexeme, memory_id)
SELECT organization_id, lexeme, memory_id FROM removed WHERE packed
ON CONFLICT DO NOTHING;

INSERT INTO memory_posting (organization_id, memory_id, lexeme, tf, doc_length)
SELECT organization_id, memory_id, lexeme, tf, doc_length FROM expected_posting
EXCEPT
SELECT organization_id, memory_id, lexeme, tf, doc_length FROM memory_posting;

INSERT INTO memory_term_stats AS t (organization_id, lexeme, shard, doc_count)
SELECT organization_id, lexeme, 0, sum(n)::bigint
FROM (SELECT organization_id, lexeme, count(*) AS n FROM expected_posting GROUP BY organization_id, lexeme
      UNION ALL
      SELECT organization_id, lexeme, -doc_count FROM memory_term_stats) d
GROUP BY organization_id, lexeme HAVING sum(n) <> 0
ON CONFLICT (organization_id, lexeme, shard) DO UPDATE SET doc_count = t.doc_count + EXCLUDED.doc_count;

INSERT INTO memory_corpus_stats AS c (organization_id, shard, doc_count, total_length)
SELECT organization_id, 0, sum(n)::bigint, sum(total)::bigint
FROM (SELECT organization_id, count(*) AS n, coalesce(sum(length(content_tsv)), 0) AS total
      FROM memory GROUP BY organization_id
      UNION ALL
      SELECT organization_id, -doc_count, -total_length FROM memory_corpus_stats) d
GROUP BY organization_id HAVING sum(n) <> 0 OR sum(total) <> 0
ON CONFLICT (organization_id, shard) DO UPDATE
    SET doc_count = c.doc_count + EXCLUDED.doc_count, total_length = c.total_length + EXCLUDED.total_length;

ALTER TABLE memory FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_posting FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_posting_gone FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_term_stats FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_corpus_stats FORCE ROW LEVEL SECURITY;
