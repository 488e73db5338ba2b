-- What retrieval reads before it searches (the agent's read scopes, the organisation's taxonomy, whether any
-- entity has a profile), as one prepared call: the function sets the organisation for the rest of the caller's
-- transaction, an implicit one when called on its own, so the setting ends with the call; its statements' plans
-- are cached per session. Runs with the caller's rights, so RLS applies.
CREATE FUNCTION memory_retrieval_context(org uuid, agent uuid)
    RETURNS TABLE (read_scopes text[], taxonomy json, has_entity_profiles boolean)
    LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM set_config('app.organization_id', org::text, true);
    RETURN QUERY SELECT
        (SELECT p.memory_read_scopes FROM agent_profile p WHERE p.organization_id = org AND p.agent_id = agent),
        coalesce((SELECT json_agg(json_build_object('id', n.id, 'parent_id', n.parent_id, 'name', n.name)
                                  ORDER BY n.name, n.id)
                  FROM memory_taxonomy_node n WHERE n.organization_id = org), '[]'::json),
        EXISTS (SELECT 1 FROM memory_entity e WHERE e.organization_id = org AND e.synthesis_memory_id IS NOT NULL);
END
$$;
