-- The lifecycle sweep and the prune visit the organisations round robin as the outbox sweep does, each with its
-- own turn: a bounded number per run, least recently visited first.
ALTER TABLE domain_event_outbox_org ADD COLUMN lifecycle_swept_at timestamptz, ADD COLUMN pruned_at timestamptz;
CREATE INDEX domain_event_outbox_org_lifecycle_sweep ON domain_event_outbox_org (lifecycle_swept_at NULLS FIRST, organization_id);
CREATE INDEX domain_event_outbox_org_prune ON domain_event_outbox_org (pruned_at NULLS FIRST, organization_id);
GRANT UPDATE (lifecycle_swept_at, pruned_at) ON domain_event_outbox_org TO memory_app;
