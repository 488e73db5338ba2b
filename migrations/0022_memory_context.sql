-- A memory's context: text that situates it without being it (the turns before a conversational memory, the
-- heading path of a document chunk). It is indexed for keyword search and embedded with the content, but never
-- returned as content or injected into a prompt.
ALTER TABLE memory ADD COLUMN context text CHECK (context IS NULL OR length(context) <= 8192);
ALTER TABLE memory DROP COLUMN content_tsv;
ALTER TABLE memory ADD COLUMN content_tsv tsvector
    GENERATED ALWAYS AS (to_tsvector('memory_text', content || coalesce(' ' || context, ''))) STORED;
