-- The files of a project's repository that its last import did not make memory of, with the reason (a secret's
-- name, ignored, not text, too large, binary, unreadable, over the import's budget, empty), for the operator
-- (memory-admin jobs status). An import replaces its repository's list.
CREATE TABLE memory_skipped_file (
    organization_id uuid NOT NULL,
    project_id      uuid NOT NULL,
    repository      text NOT NULL,
    path            text NOT NULL,
    reason          text NOT NULL CHECK (reason IN ('secret', 'ignored', 'not_text', 'too_large', 'binary',
                                                    'unreadable', 'over_budget', 'empty')),
    detail          text NOT NULL DEFAULT '',
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, project_id, repository, path)
);
ALTER TABLE memory_skipped_file ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_skipped_file FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memory_skipped_file USING (organization_id = app_current_org())
    WITH CHECK (organization_id = app_current_org());
GRANT SELECT, INSERT, DELETE ON memory_skipped_file TO memory_app;
