-- The taxonomy: a tree of topics per organisation, and which memories are tagged with which node.
CREATE TABLE memory_taxonomy_node (
    organization_id uuid NOT NULL,
    id              uuid NOT NULL,
    parent_id       uuid,
    name            text NOT NULL CHECK (length(name) > 0),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, id),
    FOREIGN KEY (organization_id, parent_id) REFERENCES memory_taxonomy_node (organization_id, id),
    UNIQUE NULLS NOT DISTINCT (organization_id, parent_id, name)
);
CREATE INDEX memory_taxonomy_node_parent ON memory_taxonomy_node (organization_id, parent_id);

CREATE TABLE memory_taxonomy_tag (
    organization_id uuid NOT NULL,
    memory_id       uuid NOT NULL,
    node_id         uuid NOT NULL,
    PRIMARY KEY (organization_id, memory_id, node_id),
    FOREIGN KEY (organization_id, memory_id) REFERENCES memory (organization_id, id) ON DELETE CASCADE,
    FOREIGN KEY (organization_id, node_id) REFERENCES memory_taxonomy_node (organization_id, id) ON DELETE CASCADE
);
CREATE INDEX memory_taxonomy_tag_node ON memory_taxonomy_tag (organization_id, node_id);
