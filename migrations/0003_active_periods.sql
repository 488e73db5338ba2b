-- When each memory was active, so that retrieval can answer as the store stood at a past time (`as_of`). A period
-- opens when a memory becomes active (written active, promoted, reinstated) and closes when it stops (superseded,
-- archived, demoted, forgotten), at the time of the transaction that changed it. Triggers keep it, so no transition
-- can forget to. Memories that were current before this table existed are taken as active since they were written.
CREATE TABLE memory_active_period (
    organization_id uuid NOT NULL,
    memory_id uuid NOT NULL,
    active_from timestamptz NOT NULL,
    active_until timestamptz,
    PRIMARY KEY (organization_id, memory_id, active_from),
    FOREIGN KEY (organization_id, memory_id) REFERENCES memory (organization_id, id) ON DELETE CASCADE,
    CHECK (active_until IS NULL OR active_until >= active_from)
);

ALTER TABLE memory_active_period ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memory_active_period
    USING (organization_id = app_current_org()) WITH CHECK (organization_id = app_current_org());
GRANT SELECT, INSERT, UPDATE ON memory_active_period TO memory_app;

CREATE FUNCTION memory_active_period_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_active_period (organization_id, memory_id, active_from)
    SELECT organization_id, id, now() FROM new_rows WHERE status = 'active';
    RETURN NULL;
END
$$;

CREATE FUNCTION memory_active_period_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE memory_active_period p SET active_until = now()
    FROM old_rows o JOIN new_rows n ON n.organization_id = o.organization_id AND n.id = o.id
    WHERE o.status = 'active' AND n.status <> 'active'
      AND p.organization_id = o.organization_id AND p.memory_id = o.id AND p.active_until IS NULL;
    -- Active again in the transaction that ended its last period: that period goes on.
    INSERT INTO memory_active_period (organization_id, memory_id, active_from)
    SELECT n.organization_id, n.id, now()
    FROM old_rows o JOIN new_rows n ON n.organization_id = o.organization_id AND n.id = o.id
    WHERE o.status <> 'active' AND n.status = 'active'
    ON CONFLICT (organization_id, memory_id, active_from) DO UPDATE SET active_until = NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER memory_active_period_insert AFTER INSERT ON memory REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_active_period_add();
CREATE TRIGGER memory_active_period_update AFTER UPDATE ON memory
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_active_period_change();

-- The migrations' role owns the tables without bypassing RLS: the backfill reads every organisation's memories with
-- the policies lifted, and forces them again after.
ALTER TABLE memory NO FORCE ROW LEVEL SECURITY;
INSERT INTO memory_active_period (organization_id, memory_id, active_from, active_until)
SELECT organization_id, id, created_at,
       CASE status WHEN 'superseded' THEN greatest(created_at, superseded_at)
                   WHEN 'archived' THEN greatest(created_at, archived_at) END
FROM memory
WHERE status = 'active'
   OR (status = 'superseded' AND superseded_at IS NOT NULL)
   OR (status = 'archived' AND archived_at IS NOT NULL);
ALTER TABLE memory FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_active_period FORCE ROW LEVEL SECURITY;
