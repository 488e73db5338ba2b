-- Bounds for every session of the services: no transaction idles with its locks (a warm Lambda frozen before its
-- connection's release ended a read's transaction), no lock wait or statement runs away. Retrieval sets tighter
-- statement timeouts per transaction; the outbox relay raises the idle limit for its own.
DO $$
BEGIN
    EXECUTE format('ALTER ROLE memory_app IN DATABASE %I SET idle_in_transaction_session_timeout = %L',
                   current_database(), '10s');
    EXECUTE format('ALTER ROLE memory_app IN DATABASE %I SET lock_timeout = %L', current_database(), '5s');
    EXECUTE format('ALTER ROLE memory_app IN DATABASE %I SET statement_timeout = %L', current_database(), '30s');
END
$$;
