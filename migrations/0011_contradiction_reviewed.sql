-- One row per (new memory, existing memory) pair checked for contradiction, so a redelivered check job
-- applies its confidence changes once.
CREATE TABLE memory_contradiction_reviewed (
    organization_id    uuid NOT NULL,
    new_memory_id      uuid NOT NULL,
    existing_memory_id uuid NOT NULL,
    relation           text NOT NULL CHECK (relation IN ('contradictory', 'redundant', 'independent')),
    reviewed_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, new_memory_id, existing_memory_id),
    FOREIGN KEY (organization_id, new_memory_id) REFERENCES memory (organization_id, id) ON DELETE CASCADE,
    FOREIGN KEY (organization_id, existing_memory_id) REFERENCES memory (organization_id, id) ON DELETE CASCADE
);

ALTER TABLE memory_contradiction_reviewed ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_contradiction_reviewed FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memory_contradiction_reviewed
    USING (organization_id = app_current_org()) WITH CHECK (organization_id = app_current_org());
GRANT SELECT, INSERT, UPDATE, DELETE ON memory_contradiction_reviewed TO memory_app;
