-- A file-backed memory whose file changed is kept and marked (stale until its text is re-ingested or the file
-- matches again), and one whose file is missing is marked first and archived only after a grace period.
ALTER TABLE memory ADD COLUMN file_changed_at timestamptz, ADD COLUMN file_missing_since timestamptz;
