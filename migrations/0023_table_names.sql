-- Tables named for what they hold: every pair of memories considered for deduplication, deferred or decided, and
-- the decisions a job was not allowed to apply, held for a person. Policies, grants, keys and indexes follow the
-- tables.
ALTER TABLE memory_dedup_reviewed RENAME TO memory_dedup_pair;
ALTER TABLE memory_lifecycle_review RENAME TO memory_held_decision;
