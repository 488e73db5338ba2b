-- Forgetting leaves no word behind, and producers forget what they wrote and anchor no chunk unless granted.
--
-- The keyword index's rows of words no memory holds any more are deleted (lists and statistics), so memory_app
-- may delete them; those left before (empty lists, statistics summing to zero) are deleted here, with the gone
-- records of lists that no longer exist. The owner reads every organisation's rows meanwhile.
GRANT DELETE ON memory_term_stats, memory_posting_list TO memory_app;
ALTER TABLE memory_posting_list NO FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_posting_gone NO FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_term_stats NO FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_posting NO FORCE ROW LEVEL SECURITY;
DELETE FROM memory_posting_list l WHERE NOT EXISTS (
    SELECT 1 FROM memory_posting p WHERE p.organization_id = l.organization_id AND p.lexeme = l.lexeme);
DELETE FROM memory_posting_gone g WHERE NOT EXISTS (
    SELECT 1 FROM memory_posting_list l WHERE l.organization_id = g.organization_id AND l.lexeme = g.lexeme);
DELETE FROM memory_term_stats t USING (
    SELECT organization_id, lexeme FROM memory_term_stats GROUP BY organization_id, lexeme HAVING sum(doc_count) = 0) z
WHERE t.organization_id = z.organization_id AND t.lexeme = z.lexeme;
ALTER TABLE memory_posting_list FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_posting_gone FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_term_stats FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_posting FORCE ROW LEVEL SECURITY;

-- A taxonomy node an operator imported (memory-admin taxonomy import) is curated and stays when no memory uses it;
-- a node ingestion created is deleted when the last memory tagged under it is forgotten. Nodes recorded before this
-- migration count as created by ingestion.
ALTER TABLE memory_taxonomy_node ADD COLUMN curated boolean NOT NULL DEFAULT false;

-- Every profile an entity ever had (current, superseded, archived) is found by its entity when a source is
-- forgotten.
CREATE INDEX memory_profile_of_entity ON memory (organization_id, source_ref) WHERE source_kind = 'synthesis';

-- The producer whose batch wrote a memory (the role of its SQS sender; NULL: an operator's import, the service's
-- own rows, or a memory written before this migration), so that a producer's forget request reaches what it wrote
-- only, unless its grant says otherwise.
ALTER TABLE memory ADD COLUMN sender text;
ALTER TABLE memory_producer ADD COLUMN forgets_any boolean NOT NULL DEFAULT false;
-- Only a repository importer (memory-admin import-repo's sender) writes memories anchored to a file's chunk: a
-- producer's anchored "copy" of a chunk would otherwise take the chunk's place.
ALTER TABLE memory_producer ADD COLUMN imports boolean NOT NULL DEFAULT false;

-- A forget request larger than one delivery: what is left of it, continued by follow-up jobs until done.
CREATE TABLE memory_forget_request (
    organization_id uuid NOT NULL,
    id              uuid NOT NULL,
    selector        jsonb NOT NULL,
    -- Only memories of batches this sender sent (NULL: any memory of the organisation).
    sender          text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, id)
);
ALTER TABLE memory_forget_request ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_forget_request FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memory_forget_request USING (organization_id = app_current_org())
    WITH CHECK (organization_id = app_current_org());
GRANT SELECT, INSERT, DELETE ON memory_forget_request TO memory_app;

-- A curated import restores an export's supersessions through the same rules as the lifecycle jobs; one the rules
-- forbid is held for review like theirs.
ALTER TABLE memory_held_decision DROP CONSTRAINT memory_lifecycle_review_job_check;
ALTER TABLE memory_held_decision ADD CONSTRAINT memory_held_decision_job_check
    CHECK (job IN ('dedup', 'contradiction', 'import'));
