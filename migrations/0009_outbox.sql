-- Domain events written in the same transaction as the change they describe, published to EventBridge later.
CREATE TABLE domain_event_outbox (
    organization_id uuid NOT NULL,
    id              uuid NOT NULL,
    event_type      text NOT NULL,
    payload         jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    published_at    timestamptz,
    PRIMARY KEY (organization_id, id)
);
CREATE INDEX domain_event_outbox_unpublished ON domain_event_outbox (created_at) WHERE published_at IS NULL;
