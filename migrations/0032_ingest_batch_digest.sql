-- What a batch held when it was first ingested (`sha256:` of its memories' texts, in order), so a later message under
-- the same batch_id with other texts is refused instead of acknowledged as a redelivery. NULL for batches recorded
-- before.
ALTER TABLE memory_ingest_batch ADD COLUMN digest text;
