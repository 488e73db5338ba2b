-- A pair whose model answer was unusable is recorded as such, so the check completes for the others and the pair
-- is not asked again.
ALTER TABLE memory_contradiction_reviewed DROP CONSTRAINT memory_contradiction_reviewed_relation_check;
ALTER TABLE memory_contradiction_reviewed ADD CONSTRAINT memory_contradiction_reviewed_relation_check
    CHECK (relation IN ('contradictory', 'redundant', 'independent', 'unusable'));
