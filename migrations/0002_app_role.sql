-- The role the services connect as: not the owner of any table, not superuser, not BYPASSRLS.
-- Roles are cluster-wide, so creating it must tolerate another database having done so first.
DO $$
BEGIN
    CREATE ROLE memory_app LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

GRANT USAGE ON SCHEMA public TO memory_app;

-- The organisation of the current transaction, set by the application with
-- set_config('app.organization_id', $1, true). NULL when unset, so RLS policies match nothing.
CREATE FUNCTION app_current_org() RETURNS uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT NULLIF(current_setting('app.organization_id', true), '')::uuid $$;

GRANT EXECUTE ON FUNCTION app_current_org() TO memory_app;
