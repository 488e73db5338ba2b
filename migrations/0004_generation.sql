-- Each organisation's generation: how many statements have changed what its retrievals read (its memories, their
-- taxonomy tags and entity mentions, its entities, profiles and taxonomy), committed. Retrieval reads it in the
-- context call that precedes every request and keeps Stage 1's candidates in process under it, so a kept answer is
-- used only while nothing it read has changed.
--
-- The count is kept in shards per organisation, as the BM25 totals are: a writer bumps the first shard no other
-- transaction holds (opening a new one when all are held), so concurrent writers of one organisation do not queue
-- on one row. The generation is the sum over the shards; rows are never deleted (the service's role may not), so
-- it only grows.
CREATE TABLE memory_generation (
    organization_id uuid NOT NULL,
    shard smallint NOT NULL,
    changes bigint NOT NULL,
    PRIMARY KEY (organization_id, shard)
);

ALTER TABLE memory_generation ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_generation FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memory_generation
    USING (organization_id = app_current_org()) WITH CHECK (organization_id = app_current_org());
GRANT SELECT, INSERT, UPDATE ON memory_generation TO memory_app;

-- One change of what the organisation's retrievals read (also called for a change no row shows: its own ANN index).
CREATE FUNCTION memory_generation_note(org uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    s integer;
BEGIN
    SELECT shard INTO s FROM memory_generation WHERE organization_id = org
    ORDER BY shard LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        UPDATE memory_generation SET changes = changes + 1 WHERE organization_id = org AND shard = s;
    ELSE
        s := coalesce((SELECT max(shard) FROM memory_generation WHERE organization_id = org), -1)
             + 1 + floor(random() * 8)::integer;
        INSERT INTO memory_generation AS g (organization_id, shard, changes)
        VALUES (org, CASE WHEN s > 32000 THEN floor(random() * 32000)::integer ELSE s END, 1)
        ON CONFLICT (organization_id, shard) DO UPDATE SET changes = g.changes + 1;
    END IF;
END
$$;

CREATE FUNCTION memory_generation_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM memory_generation_note(o) FROM (SELECT DISTINCT organization_id AS o FROM changed_rows ORDER BY 1) d;
    RETURN NULL;
END
$$;

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['memory', 'memory_entity', 'memory_entity_mention', 'memory_entity_profile',
                             'memory_taxonomy_node', 'memory_taxonomy_tag'] LOOP
        EXECUTE format('CREATE TRIGGER %1$s_generation_insert AFTER INSERT ON %1$I REFERENCING NEW TABLE AS changed_rows '
                       'FOR EACH STATEMENT EXECUTE FUNCTION memory_generation_bump()', t);
        EXECUTE format('CREATE TRIGGER %1$s_generation_update AFTER UPDATE ON %1$I REFERENCING NEW TABLE AS changed_rows '
                       'FOR EACH STATEMENT EXECUTE FUNCTION memory_generation_bump()', t);
        EXECUTE format('CREATE TRIGGER %1$s_generation_delete AFTER DELETE ON %1$I REFERENCING OLD TABLE AS changed_rows '
                       'FOR EACH STATEMENT EXECUTE FUNCTION memory_generation_bump()', t);
    END LOOP;
END
$$;

DROP FUNCTION memory_retrieval_context(uuid, uuid);
CREATE FUNCTION memory_retrieval_context(org uuid, agent uuid)
    RETURNS TABLE(read_scopes text[], taxonomy json, has_entity_profiles boolean, generation bigint, memories bigint)
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM set_config('app.organization_id', org::text, true);
    RETURN QUERY SELECT
        (SELECT p.memory_read_scopes FROM agent_profile p WHERE p.organization_id = org AND p.agent_id = agent),
        coalesce((SELECT json_agg(json_build_object('id', n.id, 'parent_id', n.parent_id, 'name', n.name)
                                  ORDER BY n.name, n.id)
                  FROM memory_taxonomy_node n WHERE n.organization_id = org), '[]'::json),
        EXISTS (SELECT 1 FROM memory_entity e WHERE e.organization_id = org AND e.synthesis_memory_id IS NOT NULL),
        (SELECT coalesce(sum(g.changes), 0)::bigint FROM memory_generation g WHERE g.organization_id = org),
        (SELECT coalesce(sum(c.doc_count), 0)::bigint FROM memory_corpus_stats c WHERE c.organization_id = org);
END
$$;
