-- Synthesis and the file scan replace a memory by its new version through the same guarded verbs as the other
-- jobs; a replacement the rules forbid is held for review under their names.
ALTER TABLE memory_held_decision DROP CONSTRAINT memory_held_decision_job_check;
ALTER TABLE memory_held_decision ADD CONSTRAINT memory_held_decision_job_check
    CHECK (job IN ('dedup', 'contradiction', 'import', 'synthesis', 'file_scan'));
