-- Entities mentioned by memories, and the synthesised profile memory of each.
CREATE TABLE memory_entity (
    organization_id     uuid NOT NULL,
    id                  uuid NOT NULL,
    name                text NOT NULL CHECK (length(name) > 0),
    entity_type         text NOT NULL DEFAULT 'concept',
    synthesis_memory_id uuid,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, id),
    UNIQUE (organization_id, entity_type, name),
    FOREIGN KEY (organization_id, synthesis_memory_id) REFERENCES memory (organization_id, id)
);

CREATE TABLE memory_entity_mention (
    organization_id uuid NOT NULL,
    entity_id       uuid NOT NULL,
    memory_id       uuid NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, entity_id, memory_id),
    FOREIGN KEY (organization_id, entity_id) REFERENCES memory_entity (organization_id, id) ON DELETE CASCADE,
    FOREIGN KEY (organization_id, memory_id) REFERENCES memory (organization_id, id) ON DELETE CASCADE
);
CREATE INDEX memory_entity_mention_memory ON memory_entity_mention (organization_id, memory_id);
