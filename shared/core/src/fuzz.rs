//! Every parser of outside input, fed arbitrary bytes and text: it answers (a value or an error), never panics;
//! and an ingest message the write gate accepts keeps every rule of the gate, as a model written apart from it
//! ([`gate_model`]) states them, while one the model refuses is refused. `make fuzz` runs these with many more
//! cases (`PROPTEST_CASES`) than the test suite does.

use proptest::prelude::*;
use uuid::Uuid;

use crate::{
    ingest::IngestBatch,
    jobs::{ContradictionCheckJob, DedupReviewJob, EntitySynthesisJob, FileScanJob},
    llm::parse_json,
    retrieval::{cooldown::Session, cooldown_token, mention::parse_mentions, named_symbol::QueryWords, time_anchor},
};

/// Text shaped like the input it stands for: JSON-ish pieces, dates, mentions, and anything at all.
fn texty() -> impl Strategy<Value = String> {
    prop_oneof![
        ".*",
        r#"[\{\}\[\]":,0-9a-z_ .@-]{0,200}"#,
        r"(on|before|after|in)? ?[0-9]{1,4}[./ -][0-9a-zA-Z]{1,9}[./ -]?[0-9]{0,4}\??",
        r#"[^@]{0,20}@memory:("[^"]{0,40}"?|.{0,40})"#,
    ]
}

/// An ingest message of the right shape with arbitrary values, so the write gate's checks are what is reached.
fn ingest_message() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, serde_json::Value::Number)),
        texty().prop_map(serde_json::Value::from),
        prop::sample::select(vec![
            "org",
            "project",
            "task",
            "agent_private",
            "semantic",
            "procedural",
            "entity_profile",
            "human",
            "file",
            "tool_output",
            "verified",
            "untrusted",
            "restricted",
            "2030-01-01T00:00:00Z"
        ])
        .prop_map(serde_json::Value::from),
    ];
    let fields = [
        "content",
        "memory_type",
        "scope",
        "confidence",
        "project_id",
        "task_id",
        "agent_id",
        "sensitivity",
        "created_at",
        "expires_at",
        "file_path",
        "context",
    ];
    let kinds = vec![
        "human",
        "file",
        "tool_output",
        "external",
        "conversation_turn",
        "run",
        "import",
        "synthesis",
        "merge",
        "explicit",
    ];
    let sha = prop_oneof![Just(None), Just(Some("0123456789abcdef0123456789abcdef01234567")), Just(Some("not-a-sha"))];
    // Mostly well-typed values, so that many messages parse and reach the gate's rules; some of anything.
    let names = |all: Vec<&'static str>| prop::sample::select(all).prop_map(serde_json::Value::from);
    let id = Just(serde_json::Value::from("0b000000-0000-4000-8000-000000000001"));
    let typed = prop_oneof![
        names(crate::domain::MemoryType::ALL.iter().map(|t| t.as_str()).collect()).prop_map(|v| ("memory_type", v)),
        names(crate::domain::Scope::ALL.iter().map(|s| s.as_str()).collect()).prop_map(|v| ("scope", v)),
        (-0.2f64..1.2).prop_map(|c| ("confidence", serde_json::Value::from(c))),
        prop_oneof![Just("project_id"), Just("task_id"), Just("agent_id")]
            .prop_flat_map(move |f| id.clone().prop_map(move |v| (f, v))),
        names(vec!["2020-01-01T00:00:00Z", "2099-01-01T00:00:00Z"]).prop_map(|v| ("created_at", v)),
        names(vec!["normal", "restricted"]).prop_map(|v| ("sensitivity", v)),
    ];
    let pair = prop_oneof![3 => typed, 1 => (prop::sample::select(fields.to_vec()), value.clone())];
    let trust = prop_oneof![3 => names(vec!["verified", "unverified", "untrusted"]), 1 => value];
    let memory = (prop::collection::vec(pair, 0..6), trust, prop::sample::select(kinds), sha).prop_map(
        |(pairs, trust, kind, sha)| {
            let mut m: serde_json::Map<String, serde_json::Value> = serde_json::Map::new();
            m.insert("content".into(), "a fact".into());
            m.insert("memory_type".into(), "semantic".into());
            m.insert("scope".into(), "org".into());
            m.insert(
                "provenance".into(),
                serde_json::json!({"source_kind": kind, "source_ref": "x", "trust_level": trust, "git_blob_sha": sha}),
            );
            m.insert("taxonomy".into(), serde_json::json!(["a/b"]));
            m.insert("entities".into(), serde_json::json!([{"name": "n", "kind": "k"}]));
            for (k, v) in pairs {
                m.insert(k.to_string(), v);
            }
            serde_json::Value::Object(m)
        },
    );
    let batch_id = prop_oneof![3 => "[a-z0-9-]{1,40}", 1 => texty()];
    (prop::collection::vec(memory, 0..4), batch_id).prop_map(|(memories, batch_id)| {
        serde_json::json!({"organization_id": Uuid::nil(), "batch_id": batch_id, "memories": memories}).to_string()
    })
}

proptest! {
    #[test]
    fn fuzz_ingest_messages_keep_the_write_gate_s_rules(message in ingest_message()) {
        if let Ok(batch) = serde_json::from_str::<IngestBatch>(&message) {
            let refused: Vec<(usize, &'static str)> = batch
                .memories
                .iter()
                .enumerate()
                .filter_map(|(i, m)| gate_model::refuses(m).map(|rule| (i, rule)))
                .collect();
            match crate::ingest::check(&batch) {
                Ok(checked) => {
                    prop_assert!(refused.is_empty(), "accepted, though the model refuses {refused:?}: {message}");
                    for (m, c) in batch.memories.iter().zip(&checked) {
                        if let Some(broken) = gate_model::broken_by(m, &c.new) {
                            prop_assert!(false, "stored against the rule that {broken}: {message}");
                        }
                    }
                }
                Err(error) => {
                    // The batch is refused for the first memory the model refuses or one before it (the gate has
                    // more rules than the model), or for the batch itself, saying which and why.
                    let message = error.to_string();
                    if let Some((i, rule)) = refused.first() {
                        let why = message.strip_prefix(&format!("memory {i}: "));
                        let named = why.is_some_and(|why| {
                            why.contains(rule) || gate_model::OTHER_RULES.iter().any(|other| why.contains(other))
                        });
                        let before = (0..*i).any(|j| message.starts_with(&format!("memory {j}: ")));
                        let batch_level = !message.starts_with("memory ");
                        prop_assert!(named || before || batch_level, "refused as {message:?}, the model says {rule}");
                    }
                }
            }
        }
    }

    #[test]
    fn fuzz_ingest_and_job_messages(bytes in proptest::collection::vec(any::<u8>(), 0..2048), text in texty()) {
        for input in [bytes.as_slice(), text.as_bytes()] {
            if let Ok(batch) = serde_json::from_slice::<IngestBatch>(input) {
                let _ = crate::ingest::check(&batch);
            }
            let _ = serde_json::from_slice::<DedupReviewJob>(input);
            let _ = serde_json::from_slice::<ContradictionCheckJob>(input);
            let _ = serde_json::from_slice::<EntitySynthesisJob>(input);
            let _ = serde_json::from_slice::<FileScanJob>(input);
        }
    }

    #[test]
    fn fuzz_query_text(text in texty(), symbol in ".*") {
        let _ = parse_mentions(&text);
        let anchors = time_anchor::named(&text);
        let now = chrono::Utc::now();
        let _ = time_anchor::of_the_time(&anchors, now);
        let mut chunk = crate::domain::Memory::test_fixture();
        chunk.file_path = Some("src/lib.rs".into());
        chunk.language = Some("rust".into());
        chunk.anchor = Some(crate::domain::Anchor { symbol, hash: None, start_line: 1, end_line: 1 });
        let share = QueryWords::of(&text).share_of_name(&chunk);
        prop_assert!(share.is_none_or(|s| (0.0..=1.0).contains(&s)));
    }

    #[test]
    fn fuzz_model_answers(text in texty()) {
        let _ = parse_json::<serde_json::Value>(&text);
    }

    #[test]
    fn fuzz_cooldown_tokens(token in prop_oneof![".*", "[A-Za-z0-9_-]{0,400}"]) {
        let key = cooldown_token::TokenKey::random();
        let session = Session { organization_id: Uuid::nil(), agent_id: None, session_id: "s".into() };
        prop_assert_eq!(cooldown_token::decode(&key, &session, &token), None);
    }
}

/// A source file shaped to hurt a chunker: containers nested thousands deep, long lines, huge identifiers, NULs
/// and control characters, bytes that were not UTF-8, unclosed braces and strings, many tiny declarations.
fn hostile_source() -> impl Strategy<Value = (crate::repository::Language, String)> {
    let piece = prop_oneof![
        Just("mod a {\n"),
        Just("impl A {\n"),
        Just("trait T {\n"),
        Just("class C {\n"),
        Just("class P:\n    "),
        Just("fn f() {}\n"),
        Just("def g():\n    pass\n"),
        Just("export function h() {\n"),
        Just("func (s *S) M() {\n"),
        Just("# heading\n"),
        Just("> > > quote\n"),
        Just("- [ ] - item\n"),
        Just("}\n"),
        Just("/// doc\n"),
        Just("\"unclosed "),
        Just("\0\u{1}\u{7f}"),
        Just("\u{2003}\u{a0}\u{feff}"),
    ];
    let repeated = (piece, 1usize..6000).prop_map(|(p, n)| p.repeat(n));
    let huge = prop_oneof![
        (1usize..200_000).prop_map(|n| "x".repeat(n)),
        (1usize..20_000).prop_map(|n| format!("fn {}() {{}}\n", "i".repeat(n))),
        (1usize..50_000).prop_map(|n| "function a(){}".repeat(n)),
        proptest::collection::vec(any::<u8>(), 0..4096).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ];
    let parts = proptest::collection::vec(prop_oneof![4 => repeated, 1 => huge], 1..6);
    (prop::sample::select(crate::repository::Language::ALL.to_vec()), parts)
        .prop_map(|(language, parts)| (language, parts.concat()))
}

/// The test binary's allocator: the system's, counting what each thread holds and the most it held, so a fuzz case
/// can bound the memory its work takes (what Rust code allocates; the parser's C allocations are not counted).
pub(crate) mod counting {
    use std::{
        alloc::{GlobalAlloc, Layout, System},
        cell::Cell,
    };

    pub struct Counting;

    thread_local! {
        static HELD: Cell<isize> = const { Cell::new(0) };
        static PEAK: Cell<isize> = const { Cell::new(0) };
    }

    fn add(bytes: isize) {
        let _ = HELD.try_with(|held| {
            held.set(held.get() + bytes);
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(held.get())));
        });
    }

    // SAFETY: every call is the system allocator's, with the caller's arguments; the counting touches only
    // const-initialised thread locals, which never allocate.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let p = unsafe { System.alloc(layout) };
            if !p.is_null() {
                add(layout.size() as isize);
            }
            p
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            let p = unsafe { System.alloc_zeroed(layout) };
            if !p.is_null() {
                add(layout.size() as isize);
            }
            p
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            unsafe { System.dealloc(ptr, layout) };
            add(-(layout.size() as isize));
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let p = unsafe { System.realloc(ptr, layout, new_size) };
            if !p.is_null() {
                add(new_size as isize - layout.size() as isize);
            }
            p
        }
    }

    /// The most this thread held at once while `f` ran, beyond what it held before.
    pub fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
        let before = HELD.with(Cell::get);
        PEAK.with(|peak| peak.set(before));
        let out = f();
        (out, (PEAK.with(Cell::get) - before).max(0) as usize)
    }
}

#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

/// Runs `f` on a thread with a 2 MiB stack (a Tokio blocking thread's, where the services chunk); returns its value
/// and the most memory it held.
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> (T, usize) {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(|| counting::peak_of(f))
        .expect("a thread")
        .join()
        .expect("no overflow, no panic")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(200).min(2_000), ..ProptestConfig::default() })]

    /// On a 2 MiB stack, within twice the parse budget and 32 times the file's size in memory (beside 32 MiB for
    /// the bounded contexts), every chunk bounded, no chunker failure (a panic caught).
    #[test]
    fn fuzz_chunk_hostile_files((language, text) in hostile_source()) {
        use crate::repository::chunk::{MAX_CHUNK_BYTES, MAX_CHUNKS_PER_FILE, PARSE_BUDGET, ChunkError};
        let started = std::time::Instant::now();
        let size = text.len();
        let (result, held) = on_small_stack(move || crate::repository::chunk_file("src/hostile.x", language, &text));
        prop_assert!(started.elapsed() < PARSE_BUDGET * 2, "{:?} for {size} bytes", started.elapsed());
        prop_assert!(held <= 32 * size + (32 << 20), "{held} bytes held for a file of {size}");
        prop_assert!(!matches!(result, Err(ChunkError::Failed(_))), "{result:?}");
        let chunks = result.unwrap_or_default();
        prop_assert!(chunks.len() <= MAX_CHUNKS_PER_FILE + 1);
        let bytes: usize = chunks.iter().map(|c| c.text.len()).sum();
        prop_assert!(bytes <= size + chunks.len(), "{bytes} bytes of chunks from {size}");
        for chunk in chunks {
            let sizes = (chunk.text.len(), chunk.symbol.len(), chunk.context.len());
            prop_assert!(sizes.0 <= MAX_CHUNK_BYTES && sizes.1 <= 400 && sizes.2 <= 2048, "text, symbol, context: {sizes:?}");
        }
    }

    /// Any path string: refused or read, never a panic, a wait or an I/O error standing for a client's mistake.
    #[test]
    fn fuzz_repository_paths(path in prop_oneof![".*", "[a-z./\0-]{0,300}", "(\\.\\./|[a-z]{1,300}/){0,30}[a-z.]{0,10}"]) {
        use crate::repository::{DirectoryReader, FileReadError, FileReader};
        let root = std::env::temp_dir().join("fuzz-repository-paths");
        let (org, project) = (Uuid::nil(), Uuid::nil());
        std::fs::create_dir_all(root.join(org.to_string()).join(project.to_string())).expect("a folder");
        let reader = DirectoryReader::new(&root);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let read = runtime.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(5), reader.read(org, project, &path)).await
        });
        prop_assert!(read.is_ok(), "the read of {path:?} waited");
        prop_assert!(!matches!(read.expect("answered"), Err(FileReadError::Io { .. })), "{path:?} is an I/O error");
    }
}

/// The write gate's rules (ARCHITECTURE.md, the write gate), stated apart from `ingest`: what a memory's source and
/// claims allow it to be stored as.
mod gate_model {
    use crate::{
        domain::{MemoryType, NewMemory, Scope, SourceKind, TrustLevel},
        ingest::IngestMemory,
    };

    fn rank(t: TrustLevel) -> u8 {
        match t {
            TrustLevel::Untrusted => 0,
            TrustLevel::Unverified => 1,
            TrustLevel::Verified => 2,
        }
    }

    fn blob_sha(sha: Option<&str>) -> bool {
        sha.is_some_and(|s| s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit()))
    }

    /// The trust a memory is stored with: tool output and external content untrusted; a person's or a file's named
    /// by its blob SHA as claimed; other extraction sources at most unverified; None for a source that is not one.
    fn trust(m: &IngestMemory) -> Option<TrustLevel> {
        let claimed = m.provenance.trust_level;
        match m.provenance.source_kind {
            SourceKind::ToolOutput | SourceKind::External => Some(TrustLevel::Untrusted),
            SourceKind::Human => Some(claimed),
            SourceKind::File if blob_sha(m.provenance.git_blob_sha.as_deref()) => Some(claimed),
            SourceKind::File | SourceKind::ConversationTurn | SourceKind::Run | SourceKind::Import => {
                Some(if rank(claimed) > 1 { TrustLevel::Unverified } else { claimed })
            }
            _ => None,
        }
    }

    fn cap(t: TrustLevel) -> f64 {
        [0.5, 0.85, 1.0][rank(t) as usize]
    }

    /// The words naming the gate's rules the model does not state (a memory may break one of those first).
    pub const OTHER_RULES: [&str; 11] = [
        "context",
        "file_path",
        "file-backed",
        "repository",
        "anchor",
        "ttl_seconds",
        "expires_at",
        "at most",
        "source_ref",
        "taxonomy",
        "entity",
    ];

    /// A rule the memory breaks, named by the word the gate's refusal must hold.
    pub fn refuses(m: &IngestMemory) -> Option<&'static str> {
        let needs = match m.scope {
            Scope::Org => true,
            Scope::Project => m.project_id.is_some(),
            Scope::Task => m.task_id.is_some(),
            Scope::AgentPrivate => m.agent_id.is_some(),
        };
        if m.content.trim().is_empty() {
            Some("content")
        } else if m.memory_type == MemoryType::EntityProfile {
            Some("entity_profile")
        } else if !(0.0..=1.0).contains(&m.confidence) {
            Some("confidence")
        } else if !needs {
            Some("scope")
        } else if m.created_at.is_some_and(|c| c > chrono::Utc::now() + chrono::TimeDelta::minutes(5)) {
            Some("created_at")
        } else if let Some(trust) = trust(m) {
            let instruction = matches!(m.memory_type, MemoryType::Procedural | MemoryType::Preference);
            (trust == TrustLevel::Untrusted && instruction).then_some("untrusted")
        } else {
            Some("source_kind")
        }
    }

    /// The rule `stored`, as the gate would store `m`, breaks; None when it keeps them all.
    pub fn broken_by(m: &IngestMemory, stored: &NewMemory) -> Option<&'static str> {
        let Some(trust) = trust(m) else { return Some("only extraction sources are stored") };
        if stored.provenance.trust_level != trust {
            Some("the trust level follows from the source")
        } else if stored.confidence > cap(trust) || stored.confidence != m.confidence.min(cap(trust)) {
            Some("the confidence is the claim capped by the trust level")
        } else if trust == TrustLevel::Untrusted
            && matches!(stored.memory_type, MemoryType::Procedural | MemoryType::Preference)
        {
            Some("untrusted content is never an instruction")
        } else if stored.content.trim().is_empty() || stored.content.trim() != stored.content {
            Some("the content is the trimmed text, never empty")
        } else if (stored.scope, stored.project_id, stored.project_task_id, stored.agent_id)
            != (m.scope, m.project_id, m.task_id, m.agent_id)
            || stored.sensitivity != m.sensitivity
        {
            Some("who may read it is what the producer said")
        } else if stored.provenance.source_kind != m.provenance.source_kind {
            Some("the source is recorded as given")
        } else {
            None
        }
    }
}
