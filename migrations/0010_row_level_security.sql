-- Tenant isolation backstop: every tenant table is visible and writable only for the organisation set in the
-- current transaction. FORCE applies it to the owner too; with no organisation set nothing matches.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['memory', 'memory_taxonomy_node', 'memory_taxonomy_tag', 'memory_entity',
                             'memory_entity_mention', 'memory_dedup_reviewed', 'agent_profile', 'domain_event_outbox']
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (organization_id = app_current_org()) '
                       'WITH CHECK (organization_id = app_current_org())', t);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO memory_app', t);
    END LOOP;
END
$$;
