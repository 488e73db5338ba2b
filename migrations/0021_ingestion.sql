-- The extraction hand-off: provenance kinds of extraction services, idempotent batches, and the follow-up jobs
-- an ingest sets off, written in its transaction and sent to their queues after it commits.
ALTER TABLE memory DROP CONSTRAINT memory_source_kind_check;
ALTER TABLE memory ADD CONSTRAINT memory_source_kind_check CHECK (source_kind IN
    ('conversation_turn', 'run', 'file', 'human', 'tool_output', 'external', 'synthesis', 'merge',
     'chat_message', 'event', 'import', 'explicit'));

-- Exact duplicates are found by content hash within a readership.
CREATE INDEX memory_content_hash ON memory (organization_id, content_hash) WHERE content_hash IS NOT NULL;

-- One row per ingested batch: a redelivered batch returns the ids it got the first time and changes nothing.
CREATE TABLE memory_ingest_batch (
    organization_id uuid NOT NULL,
    batch_id        text NOT NULL CHECK (length(batch_id) BETWEEN 1 AND 200),
    memory_ids      uuid[] NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, batch_id)
);

-- Jobs to send to the workers' queues, written with the change that calls for them.
CREATE TABLE memory_job_outbox (
    organization_id uuid NOT NULL,
    id              uuid NOT NULL,
    job_type        text NOT NULL CHECK (job_type IN
                        ('memory_dedup_review', 'memory_contradiction_check', 'memory_entity_synthesis',
                         'memory_file_scan', 'memory_ingest')),
    body            jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    PRIMARY KEY (organization_id, id)
);
CREATE INDEX memory_job_outbox_pending ON memory_job_outbox (organization_id, created_at, id) WHERE sent_at IS NULL;
CREATE TRIGGER memory_job_outbox_org_add AFTER INSERT ON memory_job_outbox
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION domain_event_outbox_org_add();

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['memory_ingest_batch', 'memory_job_outbox']
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (organization_id = app_current_org()) '
                       'WITH CHECK (organization_id = app_current_org())', t);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO memory_app', t);
    END LOOP;
END
$$;
