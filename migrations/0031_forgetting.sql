-- Forgetting: a forgotten memory stays as a tombstone (its id, times, status and chain links); its content is
-- erased (the empty text takes its keyword postings and statistics with it), as are its context, embedding, tags,
-- labels, file and anchor.
ALTER TABLE memory DROP CONSTRAINT memory_content_check;
ALTER TABLE memory ADD CONSTRAINT memory_content_check CHECK (length(content) > 0 OR status = 'forgotten');
ALTER TABLE memory DROP CONSTRAINT memory_status_check;
ALTER TABLE memory ADD CONSTRAINT memory_status_check
    CHECK (status IN ('candidate', 'active', 'superseded', 'archived', 'forgotten'));
