-- Who may write memories into an organisation: an SQS sender (the sending principal's id, as SQS reports it in
-- SenderId) and the highest trust level its messages may claim there. The ingest worker refuses a message from
-- a sender without a grant for the message's organisation.
CREATE TABLE memory_producer (
    organization_id uuid NOT NULL,
    sender_id       text NOT NULL CHECK (length(sender_id) BETWEEN 1 AND 256),
    name            text NOT NULL DEFAULT '' CHECK (length(name) <= 200),
    max_trust       text NOT NULL CHECK (max_trust IN ('verified', 'unverified', 'untrusted')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, sender_id)
);
ALTER TABLE memory_producer ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_producer FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memory_producer USING (organization_id = app_current_org())
    WITH CHECK (organization_id = app_current_org());
GRANT SELECT ON memory_producer TO memory_app;
