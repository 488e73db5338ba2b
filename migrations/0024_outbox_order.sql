-- Events are relayed in the order they were written (a sequence, not the writing transaction's clock), and the
-- scheduled sweep visits the organisations round robin, least recently swept first.
ALTER TABLE domain_event_outbox ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;
DROP INDEX domain_event_outbox_pending;
CREATE INDEX domain_event_outbox_pending ON domain_event_outbox (organization_id, seq) WHERE published_at IS NULL;
ALTER TABLE domain_event_outbox_org ADD COLUMN swept_at timestamptz;
CREATE INDEX domain_event_outbox_org_sweep ON domain_event_outbox_org (swept_at NULLS FIRST, organization_id);
-- The sweep stamps any organisation's row (ids and times only, no content).
CREATE POLICY relay_stamps_sweeps ON domain_event_outbox_org FOR UPDATE USING (true) WITH CHECK (true);
GRANT UPDATE (swept_at) ON domain_event_outbox_org TO memory_app;
