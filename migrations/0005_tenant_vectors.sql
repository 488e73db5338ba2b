-- The embeddings of the organisations that have an ANN index of their own, one partition each (LIST by
-- organisation), each partition with its own HNSW index. The vector branch of such an organisation reads its
-- partition alone: the planner prunes to it by the bound organisation, so planning sees one partition's index
-- whatever the number of indexed organisations (with a partial index per organisation on `memory`, it checked every
-- index's predicate). Partitions are made and dropped one organisation at a time, online, by `store::ann`
-- (`memory-admin ann-indexes`); the triggers below keep each partition equal to the organisation's embeddings.
CREATE TABLE memory_vector (
    organization_id uuid NOT NULL,
    memory_id uuid NOT NULL,
    embedding vector(384) NOT NULL,
    PRIMARY KEY (organization_id, memory_id)
) PARTITION BY LIST (organization_id);

ALTER TABLE memory_vector ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_vector FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memory_vector
    USING (organization_id = app_current_org()) WITH CHECK (organization_id = app_current_org());
GRANT SELECT, INSERT, DELETE ON memory_vector TO memory_app;

-- The organisations whose embeddings are copied into their partition (a row exists from the fill on), and whose
-- vector branch reads it (`ready`, once its HNSW index is built).
CREATE TABLE memory_vector_tenant (
    organization_id uuid NOT NULL PRIMARY KEY,
    ready boolean NOT NULL DEFAULT false
);

ALTER TABLE memory_vector_tenant ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_vector_tenant FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memory_vector_tenant
    USING (organization_id = app_current_org()) WITH CHECK (organization_id = app_current_org());
GRANT SELECT ON memory_vector_tenant TO memory_app;

-- Writers of an organisation's memories hold this lock shared while their statement copies embeddings; the
-- batches of the fill (`store::ann`) hold it exclusively, so every write lands either before a
-- batch (which copies what is committed) or after it (its own trigger copies or corrects it).
CREATE FUNCTION memory_vector_guard(org uuid, exclusive boolean) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF exclusive THEN
        PERFORM pg_advisory_xact_lock(hashtext('memory_vector'), hashtext(org::text));
    ELSE
        PERFORM pg_advisory_xact_lock_shared(hashtext('memory_vector'), hashtext(org::text));
    END IF;
END
$$;

-- The triggers are statement-level, as memory's others are, so no trigger definition names the embedding column and
-- its type can still change (`store::set_embedding_dimension`). Their deletes run per registered organisation with
-- the organisation as a parameter (EXECUTE plans once, pruned to its partition): a cached plan of a statement
-- joining the transition table would hold every partition.
CREATE FUNCTION memory_vector_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM memory_vector_guard(o, false) FROM (SELECT DISTINCT organization_id AS o FROM new_rows ORDER BY 1) d;
    INSERT INTO memory_vector (organization_id, memory_id, embedding)
    SELECT n.organization_id, n.id, n.embedding
    FROM new_rows n JOIN memory_vector_tenant t ON t.organization_id = n.organization_id
    WHERE n.embedding IS NOT NULL;
    RETURN NULL;
END
$$;

CREATE FUNCTION memory_vector_remove() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    g uuid;
BEGIN
    FOR g IN SELECT DISTINCT organization_id FROM old_rows ORDER BY 1 LOOP
        PERFORM memory_vector_guard(g, false);
        IF EXISTS (SELECT 1 FROM memory_vector_tenant t WHERE t.organization_id = g) THEN
            EXECUTE 'DELETE FROM memory_vector v USING old_rows o '
                    'WHERE v.organization_id = $1 AND o.organization_id = $1 AND v.memory_id = o.id' USING g;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- An embedding replaced or erased (a forget sets it to NULL): the copy follows.
CREATE FUNCTION memory_vector_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    g uuid;
BEGIN
    FOR g IN SELECT DISTINCT n.organization_id FROM new_rows n
             JOIN old_rows o ON o.organization_id = n.organization_id AND o.id = n.id
             WHERE o.embedding IS DISTINCT FROM n.embedding ORDER BY 1 LOOP
        PERFORM memory_vector_guard(g, false);
        IF EXISTS (SELECT 1 FROM memory_vector_tenant t WHERE t.organization_id = g) THEN
            EXECUTE 'DELETE FROM memory_vector v USING new_rows n, old_rows o '
                    'WHERE v.organization_id = $1 AND n.organization_id = $1 AND o.organization_id = $1 '
                    'AND o.id = n.id AND o.embedding IS DISTINCT FROM n.embedding AND v.memory_id = n.id' USING g;
            INSERT INTO memory_vector (organization_id, memory_id, embedding)
            SELECT n.organization_id, n.id, n.embedding
            FROM new_rows n JOIN old_rows o ON o.organization_id = n.organization_id AND o.id = n.id
            WHERE n.organization_id = g AND o.embedding IS DISTINCT FROM n.embedding AND n.embedding IS NOT NULL;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER memory_vector_insert AFTER INSERT ON memory REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_vector_add();
CREATE TRIGGER memory_vector_update AFTER UPDATE ON memory REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_vector_change();
CREATE TRIGGER memory_vector_delete AFTER DELETE ON memory REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_vector_remove();

-- The retrieval context also says whether the organisation's partition is ready: an organisation without one (most)
-- is searched exactly with one statement arm, planned alone.
DROP FUNCTION memory_retrieval_context(uuid, uuid);
CREATE FUNCTION memory_retrieval_context(org uuid, agent uuid)
    RETURNS TABLE(read_scopes text[], taxonomy json, has_entity_profiles boolean, generation bigint, memories bigint,
                  vector_partition boolean)
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
        (SELECT coalesce(sum(c.doc_count), 0)::bigint FROM memory_corpus_stats c WHERE c.organization_id = org),
        coalesce((SELECT t.ready FROM memory_vector_tenant t WHERE t.organization_id = org), false);
END
$$;
