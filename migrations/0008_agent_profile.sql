-- The part of an agent's profile that retrieval reads: which scopes of memory it may see.
CREATE TABLE agent_profile (
    organization_id    uuid NOT NULL,
    agent_id           uuid NOT NULL,
    name               text NOT NULL DEFAULT '',
    memory_read_scopes text[] NOT NULL DEFAULT '{org}'
                           CHECK (memory_read_scopes <@ ARRAY['org', 'project', 'task', 'agent_private']),
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, agent_id)
);
