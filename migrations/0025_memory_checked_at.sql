-- When the contradiction check last decided a memory: a candidate without it has not been decided yet, and the
-- lifecycle sweep sees to it once it is older than the bound.
ALTER TABLE memory ADD COLUMN checked_at timestamptz;
CREATE INDEX memory_unchecked_candidates ON memory (organization_id, updated_at) WHERE status = 'candidate' AND checked_at IS NULL;
