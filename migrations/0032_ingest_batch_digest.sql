-- What a batch held when it was first ingested (`sha256:` of its memories as JSON), so a later message under the same
-- batch_id with other memories is refused instead of acknowledged as a redelivery. NULL for batches recorded before.
ALTER TABLE memory_ingest_batch ADD COLUMN digest text;
