-- Approximate nearest neighbours by cosine distance; queries pair it with hnsw.iterative_scan so a
-- selective tenant/scope filter does not under-return.
CREATE INDEX memory_embedding_hnsw ON memory USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64);
CREATE INDEX memory_content_tsv ON memory USING gin (content_tsv);
CREATE INDEX memory_tags ON memory USING gin (tags);
CREATE INDEX memory_scope_filter ON memory (organization_id, status, scope, sensitivity);
CREATE INDEX memory_project ON memory (organization_id, project_id) WHERE project_id IS NOT NULL;
CREATE INDEX memory_task ON memory (organization_id, project_task_id) WHERE project_task_id IS NOT NULL;
CREATE INDEX memory_agent ON memory (organization_id, agent_id) WHERE agent_id IS NOT NULL;
CREATE INDEX memory_created ON memory (organization_id, created_at);
CREATE INDEX memory_file_backed ON memory (organization_id, file_path) WHERE file_backed AND status = 'active';
CREATE INDEX memory_superseded_by ON memory (organization_id, superseded_by) WHERE superseded_by IS NOT NULL;
