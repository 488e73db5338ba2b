-- The schema, as one baseline: what the migrations before it built, dumped with
-- `pg_dump --schema-only --no-owner` (tests/it/schema.rs checks that this file and that chain, kept in
-- tests/fixtures/migration-chain/, give the same dump). Later changes are migrations of their own after it.

-- The role the services connect as: not the owner of any table, not superuser, not BYPASSRLS.
-- Roles are cluster-wide, so creating it must tolerate another database having done so first.
DO $$
BEGIN
    CREATE ROLE memory_app LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

-- Function bodies name tables created further down.
SET LOCAL check_function_bodies = false;

CREATE EXTENSION IF NOT EXISTS btree_gin WITH SCHEMA public;

CREATE EXTENSION IF NOT EXISTS vector WITH SCHEMA public;

CREATE FUNCTION public.app_current_org() RETURNS uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT NULLIF(current_setting('app.organization_id', true), '')::uuid $$;

CREATE FUNCTION public.domain_event_outbox_org_add() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO domain_event_outbox_org (organization_id)
    SELECT DISTINCT organization_id FROM new_rows ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

CREATE FUNCTION public.memory_code_words(t text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT coalesce(string_agg(concat_ws(' ',
        CASE WHEN w ~ '[a-z0-9][A-Z]|[A-Z][A-Z][a-z]|[[:alpha:]][./:]+[[:alpha:]]' THEN regexp_replace(
            regexp_replace(regexp_replace(w, '([a-z0-9])([A-Z])', '\1 \2', 'g'), '([A-Z]+)([A-Z][a-z])', '\1 \2', 'g'),
            '[^[:alnum:]]+', ' ', 'g') END,
        CASE WHEN w ~ '[[:alnum:]]_+[[:alnum:]]' THEN replace(w, '_', '') END), ' '), '')
    FROM regexp_split_to_table(t, '\s+') AS w
    WHERE w ~ '[a-z0-9][A-Z]|[A-Z][A-Z][a-z]|[[:alpha:]][./:]+[[:alpha:]]|[[:alnum:]]_+[[:alnum:]]'
$$;

CREATE FUNCTION public.memory_keyword_terms(config regconfig, query text) RETURNS SETOF text
    LANGUAGE sql STABLE
    AS $$
    SELECT DISTINCT replace(m[1], '''''', '''')
    FROM regexp_split_to_table(websearch_to_tsquery(config, query || ' ' || memory_code_words(query))::text, ' [&|] ') AS part,
         regexp_matches(part, '''((?:[^'']|'''')*)''', 'g') AS m
    WHERE left(part, 1) <> '!'
$$;

CREATE FUNCTION public.memory_keyword_tsquery(config regconfig, query text) RETURNS tsquery
    LANGUAGE sql STABLE
    AS $$
    SELECT concat_ws(' & ', '(' || string_agg(part, ' | ') FILTER (WHERE left(part, 1) <> '!') || ')',
                            string_agg(part, ' & ') FILTER (WHERE left(part, 1) = '!'))::tsquery
    FROM regexp_split_to_table(websearch_to_tsquery(config, query || ' ' || memory_code_words(query))::text, ' [&|] ') AS part
    WHERE part <> ''
$$;

CREATE FUNCTION public.memory_postings_add() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO memory_posting (organization_id, memory_id, lexeme, tf, doc_length)
    SELECT r.organization_id, r.id, u.lexeme, greatest(cardinality(u.positions), 1), length(r.content_tsv)
    FROM new_rows r, unnest(r.content_tsv) u;
    RETURN NULL;
END
$$;

CREATE FUNCTION public.memory_postings_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    WITH removed AS (
        DELETE FROM memory_posting p
        USING old_rows o JOIN new_rows n ON n.organization_id = o.organization_id AND n.id = o.id
        WHERE p.organization_id = o.organization_id AND p.memory_id = o.id
          AND n.content_tsv IS DISTINCT FROM o.content_tsv
        RETURNING p.organization_id, p.lexeme, p.memory_id, p.packed)
    INSERT INTO memory_posting_gone (organization_id, lexeme, memory_id)
    SELECT organization_id, lexeme, memory_id FROM removed WHERE packed
    ON CONFLICT DO NOTHING;
    INSERT INTO memory_posting (organization_id, memory_id, lexeme, tf, doc_length)
    SELECT n.organization_id, n.id, u.lexeme, greatest(cardinality(u.positions), 1), length(n.content_tsv)
    FROM new_rows n JOIN old_rows o ON o.organization_id = n.organization_id AND o.id = n.id, unnest(n.content_tsv) u
    WHERE n.content_tsv IS DISTINCT FROM o.content_tsv;
    RETURN NULL;
END
$$;

CREATE FUNCTION public.memory_postings_remove() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    WITH removed AS (
        DELETE FROM memory_posting p USING old_rows r
        WHERE p.organization_id = r.organization_id AND p.memory_id = r.id
        RETURNING p.organization_id, p.lexeme, p.memory_id, p.packed)
    INSERT INTO memory_posting_gone (organization_id, lexeme, memory_id)
    SELECT organization_id, lexeme, memory_id FROM removed WHERE packed
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

CREATE FUNCTION public.memory_retrieval_context(org uuid, agent uuid) RETURNS TABLE(read_scopes text[], taxonomy json, has_entity_profiles boolean)
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM set_config('app.organization_id', org::text, true);
    RETURN QUERY SELECT
        (SELECT p.memory_read_scopes FROM agent_profile p WHERE p.organization_id = org AND p.agent_id = agent),
        coalesce((SELECT json_agg(json_build_object('id', n.id, 'parent_id', n.parent_id, 'name', n.name)
                                  ORDER BY n.name, n.id)
                  FROM memory_taxonomy_node n WHERE n.organization_id = org), '[]'::json),
        EXISTS (SELECT 1 FROM memory_entity e WHERE e.organization_id = org AND e.synthesis_memory_id IS NOT NULL);
END
$$;

CREATE FUNCTION public.memory_stats_add() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    WITH shards AS MATERIALIZED (
        SELECT o AS organization_id, memory_stats_claim_shard(o) AS shard
        FROM (SELECT DISTINCT organization_id AS o FROM new_rows ORDER BY 1) d
    ), corpus AS (
        INSERT INTO memory_corpus_stats AS c (organization_id, shard, doc_count, total_length)
        SELECT r.organization_id, h.shard, count(*), coalesce(sum(length(r.content_tsv)), 0)
        FROM new_rows r JOIN shards h USING (organization_id) GROUP BY 1, 2
        ON CONFLICT (organization_id, shard) DO UPDATE
            SET doc_count = c.doc_count + EXCLUDED.doc_count, total_length = c.total_length + EXCLUDED.total_length
    )
    INSERT INTO memory_term_stats AS t (organization_id, lexeme, shard, doc_count)
    SELECT r.organization_id, u.lexeme, h.shard, count(*)
    FROM new_rows r JOIN shards h USING (organization_id), unnest(r.content_tsv) u GROUP BY 1, 2, 3
    ON CONFLICT (organization_id, lexeme, shard) DO UPDATE SET doc_count = t.doc_count + EXCLUDED.doc_count;
    RETURN NULL;
END
$$;

CREATE FUNCTION public.memory_stats_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM old_rows o JOIN new_rows n ON n.organization_id = o.organization_id AND n.id = o.id
                   WHERE n.content_tsv IS DISTINCT FROM o.content_tsv) THEN
        RETURN NULL;
    END IF;
    WITH changed AS MATERIALIZED (
        SELECT o.organization_id, -1 AS sign, o.content_tsv FROM old_rows o JOIN new_rows n USING (organization_id, id)
        WHERE n.content_tsv IS DISTINCT FROM o.content_tsv
        UNION ALL
        SELECT n.organization_id, 1, n.content_tsv FROM new_rows n JOIN old_rows o USING (organization_id, id)
        WHERE n.content_tsv IS DISTINCT FROM o.content_tsv
    ), shards AS MATERIALIZED (
        SELECT o AS organization_id, memory_stats_claim_shard(o) AS shard
        FROM (SELECT DISTINCT organization_id AS o FROM changed ORDER BY 1) d
    ), corpus AS (
        INSERT INTO memory_corpus_stats AS c (organization_id, shard, doc_count, total_length)
        SELECT c.organization_id, h.shard, 0, sum(c.sign * length(c.content_tsv))
        FROM changed c JOIN shards h USING (organization_id) GROUP BY 1, 2
        ON CONFLICT (organization_id, shard) DO UPDATE SET total_length = c.total_length + EXCLUDED.total_length
    )
    INSERT INTO memory_term_stats AS t (organization_id, lexeme, shard, doc_count)
    SELECT c.organization_id, u.lexeme, h.shard, sum(c.sign)
    FROM changed c JOIN shards h USING (organization_id), unnest(c.content_tsv) u GROUP BY 1, 2, 3
    ON CONFLICT (organization_id, lexeme, shard) DO UPDATE SET doc_count = t.doc_count + EXCLUDED.doc_count;
    RETURN NULL;
END
$$;

CREATE FUNCTION public.memory_stats_claim_shard(org uuid) RETURNS smallint
    LANGUAGE plpgsql
    AS $$
DECLARE
    s integer;
BEGIN
    SELECT shard INTO s FROM memory_corpus_stats WHERE organization_id = org
    ORDER BY shard LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        RETURN s;
    END IF;
    s := coalesce((SELECT max(shard) FROM memory_corpus_stats WHERE organization_id = org), -1)
         + 1 + floor(random() * 8)::integer;
    RETURN CASE WHEN s > 32000 THEN floor(random() * 32000)::integer ELSE s END;
END
$$;

CREATE FUNCTION public.memory_stats_remove() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    WITH shards AS MATERIALIZED (
        SELECT o AS organization_id, memory_stats_claim_shard(o) AS shard
        FROM (SELECT DISTINCT organization_id AS o FROM old_rows ORDER BY 1) d
    ), corpus AS (
        INSERT INTO memory_corpus_stats AS c (organization_id, shard, doc_count, total_length)
        SELECT r.organization_id, h.shard, -count(*), -coalesce(sum(length(r.content_tsv)), 0)
        FROM old_rows r JOIN shards h USING (organization_id) GROUP BY 1, 2
        ON CONFLICT (organization_id, shard) DO UPDATE
            SET doc_count = c.doc_count + EXCLUDED.doc_count, total_length = c.total_length + EXCLUDED.total_length
    )
    INSERT INTO memory_term_stats AS t (organization_id, lexeme, shard, doc_count)
    SELECT r.organization_id, u.lexeme, h.shard, -count(*)
    FROM old_rows r JOIN shards h USING (organization_id), unnest(r.content_tsv) u GROUP BY 1, 2, 3
    ON CONFLICT (organization_id, lexeme, shard) DO UPDATE SET doc_count = t.doc_count + EXCLUDED.doc_count;
    RETURN NULL;
END
$$;

CREATE TEXT SEARCH CONFIGURATION public.memory_text (
    PARSER = pg_catalog."default" );

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR asciiword WITH english_stem;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR word WITH english_stem;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR numword WITH simple;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR email WITH simple;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR url WITH simple;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR host WITH simple;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR sfloat WITH simple;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR version WITH simple;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR hword_numpart WITH simple;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR hword_part WITH english_stem;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR hword_asciipart WITH english_stem;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR numhword WITH simple;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR asciihword WITH english_stem;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR hword WITH english_stem;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR url_path WITH simple;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR file WITH simple;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR "float" WITH simple;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR "int" WITH simple;

ALTER TEXT SEARCH CONFIGURATION public.memory_text
    ADD MAPPING FOR uint WITH simple;

CREATE TABLE public.agent_profile (
    organization_id uuid NOT NULL,
    agent_id uuid NOT NULL,
    name text DEFAULT ''::text NOT NULL,
    memory_read_scopes text[] DEFAULT '{org}'::text[] NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT agent_profile_memory_read_scopes_check CHECK ((memory_read_scopes <@ ARRAY['org'::text, 'project'::text, 'task'::text, 'agent_private'::text])),
    CONSTRAINT agent_profile_reads_org CHECK (('org'::text = ANY (memory_read_scopes)))
);

ALTER TABLE ONLY public.agent_profile FORCE ROW LEVEL SECURITY;

CREATE TABLE public.domain_event_outbox (
    organization_id uuid NOT NULL,
    id uuid NOT NULL,
    event_type text NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    published_at timestamp with time zone,
    seq bigint NOT NULL
);

ALTER TABLE ONLY public.domain_event_outbox FORCE ROW LEVEL SECURITY;

CREATE TABLE public.domain_event_outbox_org (
    organization_id uuid NOT NULL,
    swept_at timestamp with time zone,
    lifecycle_swept_at timestamp with time zone,
    pruned_at timestamp with time zone
);

ALTER TABLE ONLY public.domain_event_outbox_org FORCE ROW LEVEL SECURITY;

ALTER TABLE public.domain_event_outbox ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.domain_event_outbox_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.memory (
    organization_id uuid NOT NULL,
    id uuid NOT NULL,
    project_id uuid,
    project_task_id uuid,
    agent_id uuid,
    scope text NOT NULL,
    memory_type text NOT NULL,
    status text DEFAULT 'active'::text NOT NULL,
    sensitivity text DEFAULT 'normal'::text NOT NULL,
    content text NOT NULL,
    embedding public.vector(384),
    confidence double precision DEFAULT 0.5 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    last_verified_at timestamp with time zone,
    expires_at timestamp with time zone,
    superseded_by uuid,
    superseded_at timestamp with time zone,
    archived_at timestamp with time zone,
    file_backed boolean DEFAULT false NOT NULL,
    file_path text,
    content_hash text,
    file_last_scanned_at timestamp with time zone,
    source_kind text DEFAULT 'explicit'::text NOT NULL,
    source_ref text,
    trust_level text DEFAULT 'unverified'::text NOT NULL,
    tags text[] DEFAULT '{}'::text[] NOT NULL,
    labels jsonb DEFAULT '{}'::jsonb NOT NULL,
    file_scan_error text,
    context text,
    checked_at timestamp with time zone,
    file_changed_at timestamp with time zone,
    file_missing_since timestamp with time zone,
    repository text,
    language text,
    anchor jsonb,
    content_tsv tsvector GENERATED ALWAYS AS (to_tsvector('public.memory_text'::regconfig, (((content || COALESCE((' '::text || context), ''::text)) || ' '::text) || public.memory_code_words((content || COALESCE((' '::text || context), ''::text)))))) STORED,
    sender text,
    CONSTRAINT memory_check CHECK (((scope <> 'project'::text) OR (project_id IS NOT NULL))),
    CONSTRAINT memory_check1 CHECK (((scope <> 'task'::text) OR (project_task_id IS NOT NULL))),
    CONSTRAINT memory_check2 CHECK (((scope <> 'agent_private'::text) OR (agent_id IS NOT NULL))),
    CONSTRAINT memory_check3 CHECK (((NOT file_backed) OR (file_path IS NOT NULL))),
    CONSTRAINT memory_check4 CHECK (((anchor IS NULL) OR ((file_path IS NOT NULL) AND (jsonb_typeof(anchor) = 'object'::text)))),
    CONSTRAINT memory_confidence_check CHECK (((confidence >= (0)::double precision) AND (confidence <= (1)::double precision))),
    CONSTRAINT memory_content_check CHECK (((length(content) > 0) OR (status = 'forgotten'::text))),
    CONSTRAINT memory_context_check CHECK (((context IS NULL) OR (length(context) <= 8192))),
    CONSTRAINT memory_labels_check CHECK ((jsonb_typeof(labels) = 'object'::text)),
    CONSTRAINT memory_language_check CHECK (((language IS NULL) OR (length(language) <= 32))),
    CONSTRAINT memory_memory_type_check CHECK ((memory_type = ANY (ARRAY['episodic'::text, 'semantic'::text, 'procedural'::text, 'preference'::text, 'entity_profile'::text, 'execution_summary'::text]))),
    CONSTRAINT memory_repository_check CHECK (((repository IS NULL) OR (length(repository) <= 200))),
    CONSTRAINT memory_scope_check CHECK ((scope = ANY (ARRAY['org'::text, 'project'::text, 'task'::text, 'agent_private'::text]))),
    CONSTRAINT memory_sensitivity_check CHECK ((sensitivity = ANY (ARRAY['normal'::text, 'restricted'::text]))),
    CONSTRAINT memory_source_kind_check CHECK ((source_kind = ANY (ARRAY['conversation_turn'::text, 'run'::text, 'file'::text, 'human'::text, 'tool_output'::text, 'external'::text, 'synthesis'::text, 'merge'::text, 'chat_message'::text, 'event'::text, 'import'::text, 'explicit'::text]))),
    CONSTRAINT memory_status_check CHECK ((status = ANY (ARRAY['candidate'::text, 'active'::text, 'superseded'::text, 'archived'::text, 'forgotten'::text]))),
    CONSTRAINT memory_trust_level_check CHECK ((trust_level = ANY (ARRAY['verified'::text, 'unverified'::text, 'untrusted'::text])))
)
WITH (toast_tuple_target='8160');

ALTER TABLE ONLY public.memory FORCE ROW LEVEL SECURITY;

CREATE TABLE public.memory_contradiction_reviewed (
    organization_id uuid NOT NULL,
    new_memory_id uuid NOT NULL,
    existing_memory_id uuid NOT NULL,
    relation text NOT NULL,
    reviewed_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT memory_contradiction_reviewed_relation_check CHECK ((relation = ANY (ARRAY['contradictory'::text, 'redundant'::text, 'independent'::text, 'unusable'::text])))
);

ALTER TABLE ONLY public.memory_contradiction_reviewed FORCE ROW LEVEL SECURITY;

CREATE TABLE public.memory_corpus_stats (
    organization_id uuid NOT NULL,
    doc_count bigint NOT NULL,
    total_length bigint NOT NULL,
    shard smallint DEFAULT 0 NOT NULL
);

ALTER TABLE ONLY public.memory_corpus_stats FORCE ROW LEVEL SECURITY;

CREATE VIEW public.memory_corpus_totals WITH (security_invoker='true') AS
 SELECT organization_id,
    (sum(doc_count))::bigint AS doc_count,
    (sum(total_length))::bigint AS total_length
   FROM public.memory_corpus_stats
  GROUP BY organization_id;

CREATE TABLE public.memory_dedup_pair (
    organization_id uuid CONSTRAINT memory_dedup_reviewed_organization_id_not_null NOT NULL,
    memory_a_id uuid CONSTRAINT memory_dedup_reviewed_memory_a_id_not_null NOT NULL,
    memory_b_id uuid CONSTRAINT memory_dedup_reviewed_memory_b_id_not_null NOT NULL,
    cosine_similarity double precision,
    decision text DEFAULT 'deferred'::text CONSTRAINT memory_dedup_reviewed_decision_not_null NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT memory_dedup_reviewed_created_at_not_null NOT NULL,
    reviewed_at timestamp with time zone,
    claimed_until timestamp with time zone,
    reason text,
    CONSTRAINT memory_dedup_reviewed_check CHECK ((memory_a_id < memory_b_id)),
    CONSTRAINT memory_dedup_reviewed_decision_check CHECK ((decision = ANY (ARRAY['deferred'::text, 'keep_both'::text, 'merge'::text, 'supersede_a'::text, 'supersede_b'::text])))
);

ALTER TABLE ONLY public.memory_dedup_pair FORCE ROW LEVEL SECURITY;

CREATE TABLE public.memory_entity (
    organization_id uuid NOT NULL,
    id uuid NOT NULL,
    name text NOT NULL,
    entity_type text DEFAULT 'concept'::text NOT NULL,
    synthesis_memory_id uuid,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT memory_entity_name_check CHECK ((length(name) > 0))
);

ALTER TABLE ONLY public.memory_entity FORCE ROW LEVEL SECURITY;

CREATE TABLE public.memory_entity_mention (
    organization_id uuid NOT NULL,
    entity_id uuid NOT NULL,
    memory_id uuid NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE ONLY public.memory_entity_mention FORCE ROW LEVEL SECURITY;

CREATE TABLE public.memory_entity_profile (
    organization_id uuid NOT NULL,
    entity_id uuid NOT NULL,
    readership text NOT NULL,
    memory_id uuid NOT NULL,
    source_digest text NOT NULL,
    source_count integer NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE ONLY public.memory_entity_profile FORCE ROW LEVEL SECURITY;

CREATE TABLE public.memory_forget_request (
    organization_id uuid NOT NULL,
    id uuid NOT NULL,
    selector jsonb NOT NULL,
    sender text,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE ONLY public.memory_forget_request FORCE ROW LEVEL SECURITY;

CREATE TABLE public.memory_held_decision (
    organization_id uuid CONSTRAINT memory_lifecycle_review_organization_id_not_null NOT NULL,
    id uuid CONSTRAINT memory_lifecycle_review_id_not_null NOT NULL,
    job text CONSTRAINT memory_lifecycle_review_job_not_null NOT NULL,
    action text CONSTRAINT memory_lifecycle_review_action_not_null NOT NULL,
    memory_id uuid CONSTRAINT memory_lifecycle_review_memory_id_not_null NOT NULL,
    other_memory_id uuid CONSTRAINT memory_lifecycle_review_other_memory_id_not_null NOT NULL,
    reason text CONSTRAINT memory_lifecycle_review_reason_not_null NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT memory_lifecycle_review_created_at_not_null NOT NULL,
    resolved_at timestamp with time zone,
    CONSTRAINT memory_held_decision_job_check CHECK ((job = ANY (ARRAY['dedup'::text, 'contradiction'::text, 'import'::text])))
);

ALTER TABLE ONLY public.memory_held_decision FORCE ROW LEVEL SECURITY;

CREATE TABLE public.memory_ingest_batch (
    organization_id uuid NOT NULL,
    batch_id text NOT NULL,
    memory_ids uuid[] NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    digest text,
    CONSTRAINT memory_ingest_batch_batch_id_check CHECK (((length(batch_id) >= 1) AND (length(batch_id) <= 200)))
);

ALTER TABLE ONLY public.memory_ingest_batch FORCE ROW LEVEL SECURITY;

CREATE TABLE public.memory_job_outbox (
    organization_id uuid NOT NULL,
    id uuid NOT NULL,
    job_type text NOT NULL,
    body jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    sent_at timestamp with time zone,
    CONSTRAINT memory_job_outbox_job_type_check CHECK ((job_type = ANY (ARRAY['memory_dedup_review'::text, 'memory_contradiction_check'::text, 'memory_entity_synthesis'::text, 'memory_file_scan'::text, 'memory_ingest'::text])))
);

ALTER TABLE ONLY public.memory_job_outbox FORCE ROW LEVEL SECURITY;

CREATE TABLE public.memory_posting (
    organization_id uuid NOT NULL,
    memory_id uuid NOT NULL,
    lexeme text NOT NULL,
    tf integer NOT NULL,
    doc_length integer NOT NULL,
    packed boolean DEFAULT false NOT NULL
);

ALTER TABLE ONLY public.memory_posting FORCE ROW LEVEL SECURITY;

CREATE TABLE public.memory_posting_gone (
    organization_id uuid NOT NULL,
    lexeme text NOT NULL,
    memory_id uuid NOT NULL
);

ALTER TABLE ONLY public.memory_posting_gone FORCE ROW LEVEL SECURITY;

CREATE TABLE public.memory_posting_list (
    organization_id uuid NOT NULL,
    lexeme text NOT NULL,
    postings bytea NOT NULL
);
ALTER TABLE ONLY public.memory_posting_list ALTER COLUMN postings SET STORAGE EXTERNAL;

ALTER TABLE ONLY public.memory_posting_list FORCE ROW LEVEL SECURITY;

CREATE TABLE public.memory_producer (
    organization_id uuid NOT NULL,
    sender_id text NOT NULL,
    name text DEFAULT ''::text NOT NULL,
    max_trust text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    forgets_any boolean DEFAULT false NOT NULL,
    imports boolean DEFAULT false NOT NULL,
    CONSTRAINT memory_producer_max_trust_check CHECK ((max_trust = ANY (ARRAY['verified'::text, 'unverified'::text, 'untrusted'::text]))),
    CONSTRAINT memory_producer_name_check CHECK ((length(name) <= 200)),
    CONSTRAINT memory_producer_sender_id_check CHECK (((length(sender_id) >= 1) AND (length(sender_id) <= 256)))
);

ALTER TABLE ONLY public.memory_producer FORCE ROW LEVEL SECURITY;

CREATE TABLE public.memory_skipped_file (
    organization_id uuid NOT NULL,
    project_id uuid NOT NULL,
    repository text NOT NULL,
    path text NOT NULL,
    reason text NOT NULL,
    detail text DEFAULT ''::text NOT NULL,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT memory_skipped_file_reason_check CHECK ((reason = ANY (ARRAY['secret'::text, 'ignored'::text, 'not_text'::text, 'too_large'::text, 'binary'::text, 'unreadable'::text, 'over_budget'::text, 'empty'::text])))
);

ALTER TABLE ONLY public.memory_skipped_file FORCE ROW LEVEL SECURITY;

CREATE TABLE public.memory_taxonomy_node (
    organization_id uuid NOT NULL,
    id uuid NOT NULL,
    parent_id uuid,
    name text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    curated boolean DEFAULT false NOT NULL,
    CONSTRAINT memory_taxonomy_node_name_check CHECK ((length(name) > 0))
);

ALTER TABLE ONLY public.memory_taxonomy_node FORCE ROW LEVEL SECURITY;

CREATE TABLE public.memory_taxonomy_tag (
    organization_id uuid NOT NULL,
    memory_id uuid NOT NULL,
    node_id uuid NOT NULL
);

ALTER TABLE ONLY public.memory_taxonomy_tag FORCE ROW LEVEL SECURITY;

CREATE TABLE public.memory_term_stats (
    organization_id uuid NOT NULL,
    lexeme text NOT NULL,
    doc_count bigint NOT NULL,
    shard smallint DEFAULT 0 NOT NULL
);

ALTER TABLE ONLY public.memory_term_stats FORCE ROW LEVEL SECURITY;

ALTER TABLE ONLY public.agent_profile
    ADD CONSTRAINT agent_profile_pkey PRIMARY KEY (organization_id, agent_id);

ALTER TABLE ONLY public.domain_event_outbox_org
    ADD CONSTRAINT domain_event_outbox_org_pkey PRIMARY KEY (organization_id);

ALTER TABLE ONLY public.domain_event_outbox
    ADD CONSTRAINT domain_event_outbox_pkey PRIMARY KEY (organization_id, id);

ALTER TABLE ONLY public.memory_contradiction_reviewed
    ADD CONSTRAINT memory_contradiction_reviewed_pkey PRIMARY KEY (organization_id, new_memory_id, existing_memory_id);

ALTER TABLE ONLY public.memory_corpus_stats
    ADD CONSTRAINT memory_corpus_stats_pkey PRIMARY KEY (organization_id, shard);

ALTER TABLE ONLY public.memory_dedup_pair
    ADD CONSTRAINT memory_dedup_reviewed_pkey PRIMARY KEY (organization_id, memory_a_id, memory_b_id);

ALTER TABLE ONLY public.memory_entity_mention
    ADD CONSTRAINT memory_entity_mention_pkey PRIMARY KEY (organization_id, entity_id, memory_id);

ALTER TABLE ONLY public.memory_entity
    ADD CONSTRAINT memory_entity_organization_id_entity_type_name_key UNIQUE (organization_id, entity_type, name);

ALTER TABLE ONLY public.memory_entity
    ADD CONSTRAINT memory_entity_pkey PRIMARY KEY (organization_id, id);

ALTER TABLE ONLY public.memory_entity_profile
    ADD CONSTRAINT memory_entity_profile_pkey PRIMARY KEY (organization_id, entity_id, readership);

ALTER TABLE ONLY public.memory_forget_request
    ADD CONSTRAINT memory_forget_request_pkey PRIMARY KEY (organization_id, id);

ALTER TABLE ONLY public.memory_ingest_batch
    ADD CONSTRAINT memory_ingest_batch_pkey PRIMARY KEY (organization_id, batch_id);

ALTER TABLE ONLY public.memory_job_outbox
    ADD CONSTRAINT memory_job_outbox_pkey PRIMARY KEY (organization_id, id);

ALTER TABLE ONLY public.memory_held_decision
    ADD CONSTRAINT memory_lifecycle_review_organization_id_job_action_memory_i_key UNIQUE (organization_id, job, action, memory_id, other_memory_id);

ALTER TABLE ONLY public.memory_held_decision
    ADD CONSTRAINT memory_lifecycle_review_pkey PRIMARY KEY (organization_id, id);

ALTER TABLE ONLY public.memory
    ADD CONSTRAINT memory_pkey PRIMARY KEY (organization_id, id);

ALTER TABLE ONLY public.memory_posting_gone
    ADD CONSTRAINT memory_posting_gone_pkey PRIMARY KEY (organization_id, lexeme, memory_id);

ALTER TABLE ONLY public.memory_posting_list
    ADD CONSTRAINT memory_posting_list_pkey PRIMARY KEY (organization_id, lexeme);

ALTER TABLE ONLY public.memory_posting
    ADD CONSTRAINT memory_posting_pkey PRIMARY KEY (organization_id, memory_id, lexeme);

ALTER TABLE ONLY public.memory_producer
    ADD CONSTRAINT memory_producer_pkey PRIMARY KEY (organization_id, sender_id);

ALTER TABLE ONLY public.memory_skipped_file
    ADD CONSTRAINT memory_skipped_file_pkey PRIMARY KEY (organization_id, project_id, repository, path);

ALTER TABLE ONLY public.memory_taxonomy_node
    ADD CONSTRAINT memory_taxonomy_node_organization_id_parent_id_name_key UNIQUE NULLS NOT DISTINCT (organization_id, parent_id, name);

ALTER TABLE ONLY public.memory_taxonomy_node
    ADD CONSTRAINT memory_taxonomy_node_pkey PRIMARY KEY (organization_id, id);

ALTER TABLE ONLY public.memory_taxonomy_tag
    ADD CONSTRAINT memory_taxonomy_tag_pkey PRIMARY KEY (organization_id, memory_id, node_id);

ALTER TABLE ONLY public.memory_term_stats
    ADD CONSTRAINT memory_term_stats_pkey PRIMARY KEY (organization_id, lexeme, shard);

CREATE INDEX domain_event_outbox_org_lifecycle_sweep ON public.domain_event_outbox_org USING btree (lifecycle_swept_at NULLS FIRST, organization_id);

CREATE INDEX domain_event_outbox_org_prune ON public.domain_event_outbox_org USING btree (pruned_at NULLS FIRST, organization_id);

CREATE INDEX domain_event_outbox_org_sweep ON public.domain_event_outbox_org USING btree (swept_at NULLS FIRST, organization_id);

CREATE INDEX domain_event_outbox_pending ON public.domain_event_outbox USING btree (organization_id, seq) WHERE (published_at IS NULL);

CREATE INDEX domain_event_outbox_unpublished ON public.domain_event_outbox USING btree (created_at) WHERE (published_at IS NULL);

CREATE INDEX memory_agent ON public.memory USING btree (organization_id, agent_id) WHERE (agent_id IS NOT NULL);

CREATE INDEX memory_anchored ON public.memory USING btree (organization_id, project_id, file_path) WHERE ((anchor IS NOT NULL) AND (status = 'active'::text));

CREATE INDEX memory_content_hash ON public.memory USING btree (organization_id, content_hash) WHERE (content_hash IS NOT NULL);

CREATE INDEX memory_created ON public.memory USING btree (organization_id, created_at);

CREATE INDEX memory_dedup_deferred ON public.memory_dedup_pair USING btree (organization_id, created_at) WHERE (decision = 'deferred'::text);

CREATE INDEX memory_entity_mention_memory ON public.memory_entity_mention USING btree (organization_id, memory_id);

CREATE INDEX memory_entity_profiled ON public.memory_entity USING btree (organization_id) WHERE (synthesis_memory_id IS NOT NULL);

CREATE INDEX memory_file_backed ON public.memory USING btree (organization_id, file_path) WHERE (file_backed AND (status = 'active'::text));

CREATE INDEX memory_file_pages ON public.memory USING btree (organization_id, project_id, file_path COLLATE "C") WHERE (file_backed AND (status = 'active'::text));

CREATE INDEX memory_job_outbox_pending ON public.memory_job_outbox USING btree (organization_id, created_at, id) WHERE (sent_at IS NULL);

CREATE INDEX memory_posting_impact ON public.memory_posting USING btree (organization_id, lexeme, tf DESC, doc_length, memory_id);

CREATE INDEX memory_posting_tail ON public.memory_posting USING btree (organization_id, lexeme) INCLUDE (memory_id, tf, doc_length) WHERE (NOT packed);

CREATE INDEX memory_profile_of_entity ON public.memory USING btree (organization_id, source_ref) WHERE (source_kind = 'synthesis'::text);

CREATE INDEX memory_project ON public.memory USING btree (organization_id, project_id) WHERE (project_id IS NOT NULL);

CREATE INDEX memory_scope_filter ON public.memory USING btree (organization_id, status, scope, sensitivity);

CREATE INDEX memory_superseded_by ON public.memory USING btree (organization_id, superseded_by) WHERE (superseded_by IS NOT NULL);

CREATE INDEX memory_tags ON public.memory USING gin (tags);

CREATE INDEX memory_task ON public.memory USING btree (organization_id, project_task_id) WHERE (project_task_id IS NOT NULL);

CREATE INDEX memory_taxonomy_node_parent ON public.memory_taxonomy_node USING btree (organization_id, parent_id);

CREATE INDEX memory_taxonomy_tag_node ON public.memory_taxonomy_tag USING btree (organization_id, node_id);

CREATE INDEX memory_unchecked_candidates ON public.memory USING btree (organization_id, updated_at) WHERE ((status = 'candidate'::text) AND (checked_at IS NULL));

CREATE TRIGGER domain_event_outbox_org_add AFTER INSERT ON public.domain_event_outbox REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.domain_event_outbox_org_add();

CREATE TRIGGER memory_job_outbox_org_add AFTER INSERT ON public.memory_job_outbox REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.domain_event_outbox_org_add();

CREATE TRIGGER memory_postings_delete AFTER DELETE ON public.memory REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.memory_postings_remove();

CREATE TRIGGER memory_postings_insert AFTER INSERT ON public.memory REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.memory_postings_add();

CREATE TRIGGER memory_postings_update AFTER UPDATE ON public.memory REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.memory_postings_change();

CREATE TRIGGER memory_stats_delete AFTER DELETE ON public.memory REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.memory_stats_remove();

CREATE TRIGGER memory_stats_insert AFTER INSERT ON public.memory REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.memory_stats_add();

CREATE TRIGGER memory_stats_update AFTER UPDATE ON public.memory REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.memory_stats_change();

ALTER TABLE ONLY public.memory_contradiction_reviewed
    ADD CONSTRAINT memory_contradiction_reviewed_organization_id_existing_mem_fkey FOREIGN KEY (organization_id, existing_memory_id) REFERENCES public.memory(organization_id, id) ON DELETE CASCADE;

ALTER TABLE ONLY public.memory_contradiction_reviewed
    ADD CONSTRAINT memory_contradiction_reviewed_organization_id_new_memory_i_fkey FOREIGN KEY (organization_id, new_memory_id) REFERENCES public.memory(organization_id, id) ON DELETE CASCADE;

ALTER TABLE ONLY public.memory_dedup_pair
    ADD CONSTRAINT memory_dedup_reviewed_organization_id_memory_a_id_fkey FOREIGN KEY (organization_id, memory_a_id) REFERENCES public.memory(organization_id, id) ON DELETE CASCADE;

ALTER TABLE ONLY public.memory_dedup_pair
    ADD CONSTRAINT memory_dedup_reviewed_organization_id_memory_b_id_fkey FOREIGN KEY (organization_id, memory_b_id) REFERENCES public.memory(organization_id, id) ON DELETE CASCADE;

ALTER TABLE ONLY public.memory_entity_mention
    ADD CONSTRAINT memory_entity_mention_organization_id_entity_id_fkey FOREIGN KEY (organization_id, entity_id) REFERENCES public.memory_entity(organization_id, id) ON DELETE CASCADE;

ALTER TABLE ONLY public.memory_entity_mention
    ADD CONSTRAINT memory_entity_mention_organization_id_memory_id_fkey FOREIGN KEY (organization_id, memory_id) REFERENCES public.memory(organization_id, id) ON DELETE CASCADE;

ALTER TABLE ONLY public.memory_entity
    ADD CONSTRAINT memory_entity_organization_id_synthesis_memory_id_fkey FOREIGN KEY (organization_id, synthesis_memory_id) REFERENCES public.memory(organization_id, id);

ALTER TABLE ONLY public.memory_entity_profile
    ADD CONSTRAINT memory_entity_profile_organization_id_entity_id_fkey FOREIGN KEY (organization_id, entity_id) REFERENCES public.memory_entity(organization_id, id) ON DELETE CASCADE;

ALTER TABLE ONLY public.memory_entity_profile
    ADD CONSTRAINT memory_entity_profile_organization_id_memory_id_fkey FOREIGN KEY (organization_id, memory_id) REFERENCES public.memory(organization_id, id);

ALTER TABLE ONLY public.memory_held_decision
    ADD CONSTRAINT memory_lifecycle_review_organization_id_memory_id_fkey FOREIGN KEY (organization_id, memory_id) REFERENCES public.memory(organization_id, id) ON DELETE CASCADE;

ALTER TABLE ONLY public.memory_held_decision
    ADD CONSTRAINT memory_lifecycle_review_organization_id_other_memory_id_fkey FOREIGN KEY (organization_id, other_memory_id) REFERENCES public.memory(organization_id, id) ON DELETE CASCADE;

ALTER TABLE ONLY public.memory
    ADD CONSTRAINT memory_organization_id_superseded_by_fkey FOREIGN KEY (organization_id, superseded_by) REFERENCES public.memory(organization_id, id);

ALTER TABLE ONLY public.memory_taxonomy_node
    ADD CONSTRAINT memory_taxonomy_node_organization_id_parent_id_fkey FOREIGN KEY (organization_id, parent_id) REFERENCES public.memory_taxonomy_node(organization_id, id);

ALTER TABLE ONLY public.memory_taxonomy_tag
    ADD CONSTRAINT memory_taxonomy_tag_organization_id_memory_id_fkey FOREIGN KEY (organization_id, memory_id) REFERENCES public.memory(organization_id, id) ON DELETE CASCADE;

ALTER TABLE ONLY public.memory_taxonomy_tag
    ADD CONSTRAINT memory_taxonomy_tag_organization_id_node_id_fkey FOREIGN KEY (organization_id, node_id) REFERENCES public.memory_taxonomy_node(organization_id, id) ON DELETE CASCADE;

ALTER TABLE public.agent_profile ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.domain_event_outbox ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.domain_event_outbox_org ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_contradiction_reviewed ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_corpus_stats ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_dedup_pair ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_entity ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_entity_mention ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_entity_profile ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_forget_request ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_held_decision ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_ingest_batch ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_job_outbox ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_posting ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_posting_gone ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_posting_list ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_producer ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_skipped_file ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_taxonomy_node ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_taxonomy_tag ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.memory_term_stats ENABLE ROW LEVEL SECURITY;

CREATE POLICY relay_reads_every_id ON public.domain_event_outbox_org FOR SELECT USING (true);

CREATE POLICY relay_stamps_sweeps ON public.domain_event_outbox_org FOR UPDATE USING (true) WITH CHECK (true);

CREATE POLICY tenant_isolation ON public.agent_profile USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.domain_event_outbox USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.domain_event_outbox_org FOR INSERT WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_contradiction_reviewed USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_corpus_stats USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_dedup_pair USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_entity USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_entity_mention USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_entity_profile USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_forget_request USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_held_decision USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_ingest_batch USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_job_outbox USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_posting USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_posting_gone USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_posting_list USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_producer USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_skipped_file USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_taxonomy_node USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_taxonomy_tag USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

CREATE POLICY tenant_isolation ON public.memory_term_stats USING ((organization_id = public.app_current_org())) WITH CHECK ((organization_id = public.app_current_org()));

GRANT USAGE ON SCHEMA public TO memory_app;

GRANT ALL ON FUNCTION public.app_current_org() TO memory_app;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.agent_profile TO memory_app;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.domain_event_outbox TO memory_app;

GRANT SELECT,INSERT ON TABLE public.domain_event_outbox_org TO memory_app;

GRANT UPDATE(swept_at) ON TABLE public.domain_event_outbox_org TO memory_app;

GRANT UPDATE(lifecycle_swept_at) ON TABLE public.domain_event_outbox_org TO memory_app;

GRANT UPDATE(pruned_at) ON TABLE public.domain_event_outbox_org TO memory_app;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.memory TO memory_app;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.memory_contradiction_reviewed TO memory_app;

GRANT SELECT,INSERT,UPDATE ON TABLE public.memory_corpus_stats TO memory_app;

GRANT SELECT ON TABLE public.memory_corpus_totals TO memory_app;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.memory_dedup_pair TO memory_app;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.memory_entity TO memory_app;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.memory_entity_mention TO memory_app;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.memory_entity_profile TO memory_app;

GRANT SELECT,INSERT,DELETE ON TABLE public.memory_forget_request TO memory_app;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.memory_held_decision TO memory_app;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.memory_ingest_batch TO memory_app;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.memory_job_outbox TO memory_app;

GRANT SELECT,INSERT,DELETE ON TABLE public.memory_posting TO memory_app;

GRANT UPDATE(packed) ON TABLE public.memory_posting TO memory_app;

GRANT SELECT,INSERT,DELETE ON TABLE public.memory_posting_gone TO memory_app;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.memory_posting_list TO memory_app;

GRANT SELECT ON TABLE public.memory_producer TO memory_app;

GRANT SELECT,INSERT,DELETE ON TABLE public.memory_skipped_file TO memory_app;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.memory_taxonomy_node TO memory_app;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.memory_taxonomy_tag TO memory_app;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.memory_term_stats TO memory_app;
