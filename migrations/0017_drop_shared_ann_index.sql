-- no-transaction
-- Retrieval reads a tenant's own partial HNSW index (`memory-admin ann-indexes`) or scans the tenant exactly:
-- the vector branch turns index scans off for a tenant without one. The HNSW index over every row was therefore
-- written on every insert and never read (2 GB at 1M memories).
DROP INDEX CONCURRENTLY IF EXISTS memory_embedding_hnsw;
