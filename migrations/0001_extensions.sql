-- pgvector for embeddings; PostgreSQL 18 has uuidv7() and full text search built in.
CREATE EXTENSION IF NOT EXISTS vector;

-- Full-text configuration of our own, so stemming and stop words can be tuned by a later migration.
CREATE TEXT SEARCH CONFIGURATION memory_text (COPY = english);
