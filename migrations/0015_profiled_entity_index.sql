-- Retrieval asks, before it searches, whether an organisation has any synthesised entity profile (only then do
-- the branches look up which candidates mention one); this answers it without reading the organisation's entities.
CREATE INDEX memory_entity_profiled ON memory_entity (organization_id) WHERE synthesis_memory_id IS NOT NULL;
