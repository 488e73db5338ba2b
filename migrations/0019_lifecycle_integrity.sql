-- What the lifecycle jobs need to keep readership, run exactly once and publish their events.
--
-- The data changes below cover every organisation, so the tables they touch stop forcing row-level security on
-- their owner (this migration's role, which on a managed database has no BYPASSRLS) until they are done.
ALTER TABLE agent_profile NO FORCE ROW LEVEL SECURITY;
ALTER TABLE memory NO FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_entity NO FORCE ROW LEVEL SECURITY;

-- Every principal of an organisation reads its org-scope memories: read scopes are a hierarchy rooted at 'org'.
UPDATE agent_profile SET memory_read_scopes = array_prepend('org', memory_read_scopes)
WHERE NOT 'org' = ANY (memory_read_scopes);
ALTER TABLE agent_profile ADD CONSTRAINT agent_profile_reads_org CHECK ('org' = ANY (memory_read_scopes));

-- Profiles synthesised before readership partitions could mix readerships: they are retired, and each entity is
-- synthesised again, per partition, at its next trigger.
UPDATE memory_entity SET synthesis_memory_id = NULL WHERE synthesis_memory_id IS NOT NULL;
UPDATE memory SET status = 'archived', archived_at = now(), updated_at = now()
WHERE memory_type = 'entity_profile' AND status IN ('active', 'candidate');

-- Why the last scan of a file-backed memory could not read its file (NULL when it could).
ALTER TABLE memory ADD COLUMN file_scan_error text;

-- Deferred pairs are leased to one reviewer while its model call runs (outside any transaction); a decision
-- that was not the model's (readership or trust forbade it) says why.
ALTER TABLE memory_dedup_reviewed ADD COLUMN claimed_until timestamptz, ADD COLUMN reason text;

-- Decisions a job was not allowed to apply (they would widen readership or let a less trusted memory override a
-- verified one), kept for a person to review.
CREATE TABLE memory_lifecycle_review (
    organization_id uuid NOT NULL,
    id              uuid NOT NULL,
    job             text NOT NULL CHECK (job IN ('dedup', 'contradiction')),
    action          text NOT NULL,
    memory_id       uuid NOT NULL,
    other_memory_id uuid NOT NULL,
    reason          text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    resolved_at     timestamptz,
    PRIMARY KEY (organization_id, id),
    UNIQUE (organization_id, job, action, memory_id, other_memory_id),
    FOREIGN KEY (organization_id, memory_id) REFERENCES memory (organization_id, id) ON DELETE CASCADE,
    FOREIGN KEY (organization_id, other_memory_id) REFERENCES memory (organization_id, id) ON DELETE CASCADE
);

-- One current profile per entity and readership partition, with the set of sources it was built from.
CREATE TABLE memory_entity_profile (
    organization_id uuid NOT NULL,
    entity_id       uuid NOT NULL,
    readership      text NOT NULL,
    memory_id       uuid NOT NULL,
    source_digest   text NOT NULL,
    source_count    integer NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, entity_id, readership),
    FOREIGN KEY (organization_id, entity_id) REFERENCES memory_entity (organization_id, id) ON DELETE CASCADE,
    FOREIGN KEY (organization_id, memory_id) REFERENCES memory (organization_id, id)
);

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['memory_lifecycle_review', 'memory_entity_profile']
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (organization_id = app_current_org()) '
                       'WITH CHECK (organization_id = app_current_org())', t);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO memory_app', t);
    END LOOP;
END
$$;

-- The outbox relay reads one organisation's unpublished events at a time, oldest first. The organisations that
-- ever wrote an event are listed (ids only, no content) so the scheduled sweep can visit each under RLS.
CREATE INDEX domain_event_outbox_pending ON domain_event_outbox (organization_id, created_at, id)
    WHERE published_at IS NULL;
CREATE TABLE domain_event_outbox_org (
    organization_id uuid PRIMARY KEY
);
INSERT INTO domain_event_outbox_org SELECT DISTINCT organization_id FROM memory;
ALTER TABLE agent_profile FORCE ROW LEVEL SECURITY;
ALTER TABLE memory FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_entity FORCE ROW LEVEL SECURITY;
ALTER TABLE domain_event_outbox_org ENABLE ROW LEVEL SECURITY;
ALTER TABLE domain_event_outbox_org FORCE ROW LEVEL SECURITY;
-- The list is read across organisations (ids only); a row is added only by its own organisation.
CREATE POLICY relay_reads_every_id ON domain_event_outbox_org FOR SELECT USING (true);
CREATE POLICY tenant_isolation ON domain_event_outbox_org FOR INSERT WITH CHECK (organization_id = app_current_org());
GRANT SELECT, INSERT ON domain_event_outbox_org TO memory_app;
CREATE FUNCTION domain_event_outbox_org_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO domain_event_outbox_org (organization_id)
    SELECT DISTINCT organization_id FROM new_rows ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
CREATE TRIGGER domain_event_outbox_org_add AFTER INSERT ON domain_event_outbox
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION domain_event_outbox_org_add();

-- BM25 statistics change only when a memory's text does: a status change, a confidence change or a scan stamp
-- leaves them (and their rows' locks) alone.
DROP TRIGGER memory_stats_update_old ON memory;
DROP TRIGGER memory_stats_update_new ON memory;
CREATE FUNCTION memory_stats_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM old_rows o JOIN new_rows n ON n.organization_id = o.organization_id AND n.id = o.id
                   WHERE n.content_tsv IS DISTINCT FROM o.content_tsv) THEN
        RETURN NULL;
    END IF;
    WITH changed AS (
        SELECT o.organization_id, -1 AS sign, o.content_tsv FROM old_rows o JOIN new_rows n USING (organization_id, id)
        WHERE n.content_tsv IS DISTINCT FROM o.content_tsv
        UNION ALL
        SELECT n.organization_id, 1, n.content_tsv FROM new_rows n JOIN old_rows o USING (organization_id, id)
        WHERE n.content_tsv IS DISTINCT FROM o.content_tsv
    )
    UPDATE memory_corpus_stats s SET total_length = s.total_length + d.len
    FROM (SELECT organization_id, sum(sign * length(content_tsv)) AS len FROM changed GROUP BY 1) d
    WHERE s.organization_id = d.organization_id;
    WITH changed AS (
        SELECT o.organization_id, -1 AS sign, o.content_tsv FROM old_rows o JOIN new_rows n USING (organization_id, id)
        WHERE n.content_tsv IS DISTINCT FROM o.content_tsv
        UNION ALL
        SELECT n.organization_id, 1, n.content_tsv FROM new_rows n JOIN old_rows o USING (organization_id, id)
        WHERE n.content_tsv IS DISTINCT FROM o.content_tsv
    )
    INSERT INTO memory_term_stats AS s (organization_id, lexeme, doc_count)
    SELECT c.organization_id, u.lexeme, sum(c.sign) FROM changed c, unnest(c.content_tsv) u GROUP BY 1, 2
    ORDER BY 1, 2
    ON CONFLICT (organization_id, lexeme) DO UPDATE SET doc_count = s.doc_count + EXCLUDED.doc_count;
    RETURN NULL;
END
$$;
CREATE TRIGGER memory_stats_update AFTER UPDATE ON memory
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_stats_change();

-- Bounds for every session of the services: no transaction idles with its locks, no lock wait or statement runs
-- away. Retrieval sets tighter statement timeouts per transaction.
DO $$
BEGIN
    EXECUTE format('ALTER ROLE memory_app IN DATABASE %I SET idle_in_transaction_session_timeout = %L',
                   current_database(), '10s');
    EXECUTE format('ALTER ROLE memory_app IN DATABASE %I SET lock_timeout = %L', current_database(), '5s');
    EXECUTE format('ALTER ROLE memory_app IN DATABASE %I SET statement_timeout = %L', current_database(), '30s');
END
$$;
