-- One row per unordered pair of memories considered for deduplication (a < b), with the decision.
CREATE TABLE memory_dedup_reviewed (
    organization_id   uuid NOT NULL,
    memory_a_id       uuid NOT NULL,
    memory_b_id       uuid NOT NULL,
    cosine_similarity double precision,
    decision          text NOT NULL DEFAULT 'deferred'
                          CHECK (decision IN ('deferred', 'keep_both', 'merge', 'supersede_a', 'supersede_b')),
    created_at        timestamptz NOT NULL DEFAULT now(),
    reviewed_at       timestamptz,
    PRIMARY KEY (organization_id, memory_a_id, memory_b_id),
    CHECK (memory_a_id < memory_b_id),
    FOREIGN KEY (organization_id, memory_a_id) REFERENCES memory (organization_id, id) ON DELETE CASCADE,
    FOREIGN KEY (organization_id, memory_b_id) REFERENCES memory (organization_id, id) ON DELETE CASCADE
);
CREATE INDEX memory_dedup_deferred ON memory_dedup_reviewed (organization_id, created_at) WHERE decision = 'deferred';
