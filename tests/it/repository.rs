//! Repositories as memory, on git repositories made in the test with commits: an import through the ingest path
//! anchors one memory per chunk, and the file scan follows each chunk (replaced, moved, renamed, deleted).

use std::{process::Command, sync::Arc};

use integration_tests::{Db, minilm};
use memory_core::{
    domain::{Memory, MemoryStatus, TrustLevel},
    ingest::{Admission, IngestBatch, Ingestor},
    lifecycle::file_scan::{FileScanner, ScanReport},
    repository::{FileReadError, FileReader, RepositoryReader, Snapshot, blob_sha, exclude::Exclusions, import},
    retrieval::{SearchRequest, Strategy},
    store::{self},
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

pub(crate) const CONFIG_RS: &str = "use std::fs;\n\n\
/// Reads the configuration file at `path`.\n\
pub fn parse_config(path: &str) -> Config {\n    let text = fs::read_to_string(path).unwrap();\n    Config { port: text.len() as u16 }\n}\n\n\
pub struct Config {\n    port: u16,\n}\n\n\
impl Config {\n    pub fn port(&self) -> u16 {\n        self.port\n    }\n}\n";

const GUIDE_MD: &str = "# Guide\n\nHow to run it.\n\n## Deploy\n\nRun make release, then wait for the canary.\n";

/// A git repository with one commit per `commit` call.
pub(crate) struct Repo {
    pub(crate) dir: std::path::PathBuf,
}

impl Repo {
    pub(crate) fn new(dir: std::path::PathBuf) -> Self {
        std::fs::create_dir_all(&dir).unwrap();
        let repo = Self { dir };
        repo.git(&["init", "-q", "-b", "main"]);
        repo
    }

    pub(crate) fn git(&self, args: &[&str]) {
        let out = Command::new("git")
            .args(["-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"])
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    pub(crate) fn write(&self, path: &str, text: &str) {
        let file = self.dir.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    }

    pub(crate) fn commit(&self, message: &str) {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", message]);
    }
}

pub(crate) struct Setup {
    pub(crate) db: Db,
    pub(crate) org: Uuid,
    pub(crate) project: Uuid,
    pub(crate) root: std::path::PathBuf,
    pub(crate) repo: Repo,
}

impl Setup {
    pub(crate) async fn new(opts: PgPoolOptions, conn: PgConnectOptions) -> Self {
        let (org, project) = (Uuid::now_v7(), Uuid::now_v7());
        let root = std::env::temp_dir().join(format!("repository-{}", Uuid::now_v7()));
        let repo = Repo::new(root.join(org.to_string()).join(project.to_string()));
        Self { db: Db::new(opts, conn).await, org, project, root, repo }
    }

    pub(crate) fn plan(&self) -> import::ImportPlan {
        let snapshot = Snapshot::open(&self.repo.dir, "HEAD").unwrap();
        let target = import::ImportTarget {
            organization_id: self.org,
            project_id: self.project,
            repository: "demo".into(),
            reference: "HEAD".into(),
            max_file_bytes: memory_core::repository::reader::DEFAULT_MAX_FILE_BYTES,
        };
        import::plan(&snapshot, &target, Exclusions::secrets().unwrap()).unwrap()
    }

    pub(crate) async fn ingest(&self, batches: &[IngestBatch]) -> usize {
        let ingestor = Ingestor::new(self.db.app.clone(), minilm());
        let mut created = 0;
        for batch in batches {
            created += ingestor.ingest(batch, Admission::Active).await.unwrap().created;
        }
        created
    }

    pub(crate) fn scanner(&self) -> FileScanner {
        FileScanner::new(Arc::new(RepositoryReader::new(&self.root, "HEAD", 64 * 1024))).with_embedder(minilm())
    }

    /// `src/config.rs` imported, then changed and committed again before any scan: the blob SHA the import named is
    /// in the history but no longer the file's.
    async fn imported_then_moved_on(&self) {
        self.repo.write("src/config.rs", CONFIG_RS);
        self.repo.commit("first");
        self.ingest(&self.plan().batches).await;
        self.repo.write("src/config.rs", &CONFIG_RS.replace("port: u16,", "port: u16,\n    host: String,"));
        self.repo.commit("a host");
    }

    pub(crate) async fn active(&self) -> Vec<Memory> {
        let sql = "SELECT id FROM memory WHERE organization_id = $1 AND status = 'active' ORDER BY id";
        let ids: Vec<Uuid> = sqlx::query_scalar(sql).bind(self.org).fetch_all(&self.db.admin).await.unwrap();
        let mut tx = store::begin_for_org(&self.db.admin, self.org).await.unwrap();
        let mut memories = Vec::new();
        for id in ids {
            memories.push(store::memories::get(&mut *tx, self.org, id).await.unwrap().unwrap());
        }
        memories
    }

    pub(crate) async fn by_symbol(&self, symbol: &str) -> Memory {
        let found = self.active().await.into_iter().find(|m| m.anchor.as_ref().is_some_and(|a| a.symbol == symbol));
        found.unwrap_or_else(|| panic!("no active memory anchored at {symbol}"))
    }

    pub(crate) async fn get(&self, id: Uuid) -> Memory {
        let mut tx = store::begin_for_org(&self.db.admin, self.org).await.unwrap();
        store::memories::get(&mut *tx, self.org, id).await.unwrap().unwrap()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.root).ok();
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn an_import_anchors_one_verified_memory_per_chunk_and_running_it_again_changes_nothing(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let s = Setup::new(opts, conn).await;
    s.repo.write("src/config.rs", CONFIG_RS);
    s.repo.write("docs/guide.md", GUIDE_MD);
    s.repo.write("logo.png", "\u{1}binary");
    s.repo.commit("first");

    let plan = s.plan();
    assert_eq!((plan.files, plan.skipped.len()), (2, 1), "the image is skipped");
    assert_eq!(s.ingest(&plan.batches).await, plan.chunks);
    let memories = s.active().await;
    let mut symbols: Vec<&str> = memories.iter().map(|m| m.anchor.as_ref().unwrap().symbol.as_str()).collect();
    symbols.sort();
    assert_eq!(symbols, ["Config", "Config::port", "Guide", "Guide > Deploy", "parse_config"]);
    let parse = s.by_symbol("parse_config").await;
    assert!(parse.content.starts_with("/// Reads the configuration file"));
    assert_eq!(parse.content_hash.as_deref(), Some(blob_sha(CONFIG_RS.as_bytes()).as_str()), "the file's blob SHA");
    assert_eq!((parse.repository.as_deref(), parse.language.as_deref()), (Some("demo"), Some("rust")));
    assert_eq!(parse.provenance.trust_level, TrustLevel::Verified);
    assert!(parse.provenance.source_ref.as_deref().unwrap().starts_with("demo@HEAD:src/config.rs#parse_config@"));
    let anchor = parse.anchor.unwrap();
    assert_eq!((anchor.start_line, anchor.end_line), (3, 7));

    // The same snapshot again: the batches replay. The same anchors under other batch ids: no second memory.
    assert_eq!(s.ingest(&s.plan().batches).await, 0);
    let mut renamed = s.plan().batches;
    for batch in &mut renamed {
        batch.batch_id.push_str(":again");
    }
    assert_eq!(s.ingest(&renamed).await, 0);
    assert_eq!(s.active().await.len(), memories.len());

    // The first scan verifies every memory.
    let report = s.scanner().scan(&s.db.app, s.org).await.unwrap();
    assert_eq!(report, ScanReport { scanned: 5, unchanged: 5, ..ScanReport::default() });
    assert!(s.active().await.iter().all(|m| m.last_verified_at.is_some()));
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_scan_replaces_only_the_edited_chunk_follows_moves_and_renames_and_archives_deleted_files(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let s = Setup::new(opts, conn).await;
    s.repo.write("src/config.rs", CONFIG_RS);
    s.repo.write("docs/guide.md", GUIDE_MD);
    s.repo.commit("first");
    s.ingest(&s.plan().batches).await;
    s.scanner().scan(&s.db.app, s.org).await.unwrap();
    let (parse, config, port) =
        (s.by_symbol("parse_config").await, s.by_symbol("Config").await, s.by_symbol("Config::port").await);
    let guide = s.by_symbol("Guide > Deploy").await;

    // One function edited, and two lines added above everything else of the file: the edited chunk gets a new
    // version, the others move.
    let edited = CONFIG_RS.replace("text.len() as u16", "text.trim().parse().unwrap_or(8080)");
    s.repo.write("src/config.rs", &format!("// Configuration.\n\n{edited}"));
    s.repo.commit("parse the port");
    let report = s.scanner().scan(&s.db.app, s.org).await.unwrap();
    assert_eq!((report.replaced, report.moved, report.unchanged), (1, 2, 2), "{report:?}");
    let old = s.get(parse.id).await;
    assert_eq!(old.status, MemoryStatus::Superseded);
    let new = s.by_symbol("parse_config").await;
    assert_eq!(old.superseded_by, Some(new.id));
    assert!(new.content.contains("unwrap_or(8080)") && !new.content.contains("text.len()"));
    assert_eq!(new.anchor.as_ref().unwrap().start_line, 5);
    for unchanged in [&config, &port, &guide] {
        let now = s.get(unchanged.id).await;
        assert_eq!((now.status, &now.content), (MemoryStatus::Active, &unchanged.content), "no new version");
    }
    let moved = s.get(port.id).await.anchor.unwrap();
    assert_eq!(moved.start_line, port.anchor.as_ref().unwrap().start_line + 2, "the anchor follows the move");
    assert!(s.get(port.id).await.last_verified_at >= port.last_verified_at);

    // A renamed method: its old anchor is gone (missing) and the new one becomes a memory.
    s.repo.write("src/config.rs", &format!("// Configuration.\n\n{}", edited.replace("fn port(", "fn listen_port(")));
    s.repo.commit("rename");
    let report = s.scanner().scan(&s.db.app, s.org).await.unwrap();
    assert_eq!((report.missing, report.added), (1, 1), "{report:?}");
    assert!(s.get(port.id).await.file_missing_since.is_some());
    let listen = s.by_symbol("Config::listen_port").await;
    assert!(listen.content.contains("fn listen_port") && listen.last_verified_at.is_some());

    // A deleted file: missing first, archived after the grace period.
    std::fs::remove_file(s.repo.dir.join("docs/guide.md")).unwrap();
    s.repo.commit("no guide");
    let report = s.scanner().scan(&s.db.app, s.org).await.unwrap();
    assert_eq!(report.missing, 3, "the guide's two sections and the renamed method: {report:?}");
    assert_eq!(s.get(guide.id).await.status, MemoryStatus::Active);
    let no_grace = s.scanner().with_missing_grace(chrono::TimeDelta::zero());
    assert_eq!(no_grace.scan(&s.db.app, s.org).await.unwrap().archived, 3);
    assert_eq!(s.get(guide.id).await.status, MemoryStatus::Archived);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_blob_sha_the_repository_does_not_have_lowers_the_memory_to_unverified(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let s = Setup::new(opts, conn).await;
    s.repo.write("src/config.rs", CONFIG_RS);
    s.repo.commit("first");
    let mut batches = s.plan().batches;
    let lie = blob_sha(b"another text");
    for memory in &mut batches[0].memories {
        memory.provenance.git_blob_sha = Some(lie.clone());
    }
    s.ingest(&batches).await;
    assert!(s.active().await.iter().all(|m| m.provenance.trust_level == TrustLevel::Verified));

    let report = s.scanner().scan(&s.db.app, s.org).await.unwrap();
    assert_eq!(report.mismatched, 3, "{report:?}");
    for memory in s.active().await {
        assert_eq!(memory.provenance.trust_level, TrustLevel::Unverified);
        assert!(memory.file_scan_error.as_deref().unwrap().contains(&lie));
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn an_identifier_is_found_whichever_way_it_is_typed(opts: PgPoolOptions, conn: PgConnectOptions) {
    let s = Setup::new(opts, conn).await;
    s.repo.write("src/config.rs", CONFIG_RS);
    let store = "export function loadUserProfile(id: string) {\n  return fetch(id);\n}\n\n\
                 export function configParse(text: string) {\n  return text;\n}\n";
    s.repo.write("web/store.ts", store);
    s.repo.write("docs/startup.md", "# Startup\n\nParse the config, then parse the config again.\n");
    s.repo.commit("first");
    s.ingest(&s.plan().batches).await;
    let retriever = integration_tests::shipped_retriever(&s.db, minilm());
    let search = async |query: &str| {
        let request = SearchRequest {
            project_id: Some(s.project),
            max_results: 3,
            ..SearchRequest::new(s.org, Strategy::Keyword, query)
        };
        let hits = retriever.search(request).await.unwrap().hits;
        hits.first().and_then(|h| h.memory.anchor.clone()).map(|a| a.symbol).unwrap_or_default()
    };
    // The identifier, not prose repeating its words, nor another identifier of the same words.
    assert_eq!(search("parseConfig").await, "parse_config");
    assert_eq!(search("config_parse").await, "configParse");
    assert_eq!(search("ParseConfig").await, "parse_config");
    assert_eq!(search("load_user_profile").await, "loadUserProfile");
    assert_eq!(search("user profile").await, "loadUserProfile");
    assert_eq!(search("src/config.rs Config").await.split("::").next(), Some("Config"));
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_blob_sha_of_an_earlier_commit_is_honest_and_keeps_its_trust(opts: PgPoolOptions, conn: PgConnectOptions) {
    let s = Setup::new(opts, conn).await;
    s.imported_then_moved_on().await;
    let report = s.scanner().scan(&s.db.app, s.org).await.unwrap();
    assert_eq!((report.mismatched, report.replaced, report.moved, report.unchanged), (0, 1, 1, 1), "{report:?}");
    assert!(s.active().await.iter().all(|m| m.provenance.trust_level == TrustLevel::Verified));
}

/// The repository as read at HEAD, whose object database fails when asked about history (a pack being rewritten
/// by `git gc` or a sync, say).
struct HistoryUnreadable(RepositoryReader);

#[async_trait::async_trait]
impl FileReader for HistoryUnreadable {
    async fn read(&self, org: Uuid, project: Uuid, path: &str) -> Result<Option<Vec<u8>>, FileReadError> {
        self.0.read(org, project, path).await
    }
    async fn holds_blob(&self, _org: Uuid, _project: Uuid, _sha: &str) -> Result<Option<bool>, FileReadError> {
        Err(FileReadError::Repository("the pack file could not be read".into()))
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_repository_whose_history_cannot_be_read_leaves_trust_to_a_later_scan(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let s = Setup::new(opts, conn).await;
    s.imported_then_moved_on().await;

    // Whether the SHA the import named is in the history cannot be told: no verdict, the scan says why.
    let failing = Arc::new(HistoryUnreadable(RepositoryReader::new(&s.root, "HEAD", 64 * 1024)));
    let report = FileScanner::new(failing).with_embedder(minilm()).scan(&s.db.app, s.org).await.unwrap();
    assert_eq!((report.mismatched, report.failed), (0, 3), "{report:?}");
    for memory in s.active().await {
        assert_eq!(memory.provenance.trust_level, TrustLevel::Verified);
        assert!(memory.file_scan_error.as_deref().unwrap().contains("pack file"), "{memory:?}");
    }
    // The next scan that can read it finds the SHA in the history: honest, still verified.
    let report = s.scanner().scan(&s.db.app, s.org).await.unwrap();
    assert_eq!((report.mismatched, report.replaced, report.moved, report.unchanged), (0, 1, 1, 1), "{report:?}");
    assert!(s.active().await.iter().all(|m| m.provenance.trust_level == TrustLevel::Verified));
}

/// The repository tools through the HTTP API: they read the repository as committed now, the search filters keep
/// to a language and a path, and a path out of the repository is refused.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_repository_tools_read_the_committed_text_and_search_within_filters(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    use axum::{body::Body, http::Request};
    use http_body_util::BodyExt;
    use serde_json::{Value, json};
    use tower::ServiceExt;

    let s = Setup::new(opts, conn).await;
    s.repo.write("src/config.rs", CONFIG_RS);
    s.repo.write("docs/guide.md", GUIDE_MD);
    s.repo.write("web/store.ts", "export function loadConfig(id: string) {\n  return id;\n}\n");
    s.repo.commit("first");
    s.ingest(&s.plan().batches).await;
    let agent = integration_tests::agent_with_scopes(&s.db, s.org, memory_core::domain::Scope::ALL).await;
    let retriever = integration_tests::shipped_retriever(&s.db, minilm())
        .with_repositories(Arc::new(RepositoryReader::new(&s.root, "HEAD", 64 * 1024)), Exclusions::secrets().unwrap());
    let app = integration_tests::local_app(retriever);
    let token = integration_tests::local_token(s.org, Some(agent), None);
    let call = async |tool: &str, body: Value| -> (u16, Value) {
        let request = Request::post(format!("/v1/tools/{tool}"))
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        (status, serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap())
    };

    let symbol = json!({"project_id": s.project, "path": "src/config.rs", "symbol": "parse_config"});
    let (status, read) = call("read_symbol", symbol.clone()).await;
    assert_eq!(status, 200, "{read}");
    assert_eq!((read["start_line"].as_u64(), read["language"].as_str()), (Some(3), Some("rust")));
    assert!(read["text"].as_str().unwrap().contains("text.len() as u16"));

    // The file as committed now, not as imported.
    s.repo.write("src/config.rs", &CONFIG_RS.replace("text.len() as u16", "8080"));
    s.repo.commit("a fixed port");
    let (_, read) = call("read_symbol", symbol).await;
    assert!(read["text"].as_str().unwrap().contains("Config { port: 8080 }"), "{read}");
    let range = json!({"project_id": s.project, "path": "src/config.rs", "start_line": 6, "end_line": 7});
    let (status, lines) = call("read_file_range", range).await;
    assert_eq!(status, 200, "{lines}");
    assert_eq!(lines["text"], "    Config { port: 8080 }\n}\n");
    assert_eq!(lines["total_lines"], CONFIG_RS.lines().count());
    let escape = json!({"project_id": s.project, "path": "../other/secret.rs", "start_line": 1, "end_line": 2});
    assert_eq!(call("read_file_range", escape).await.0, 422);

    // Filters: the same words in Rust and TypeScript, kept to one language, one path, one repository.
    let search = async |tool: &str, filters: Value| -> Vec<String> {
        let mut body = json!({"query": "load the configuration config", "project_id": s.project});
        body.as_object_mut().unwrap().extend(filters.as_object().unwrap().clone());
        let (status, result) = call(tool, body).await;
        assert_eq!(status, 200, "{result}");
        result["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["memory"]["file_path"].as_str().unwrap().to_string())
            .collect()
    };
    for tool in ["search_lexical", "search_semantic"] {
        let all = search(tool, json!({})).await;
        assert!(all.iter().any(|p| p.ends_with(".ts")) && all.iter().any(|p| p.ends_with(".rs")), "{tool}: {all:?}");
        let rust = search(tool, json!({"language": "rust"})).await;
        assert!(!rust.is_empty() && rust.iter().all(|p| p == "src/config.rs"), "{tool}: {rust:?}");
        let web = search(tool, json!({"path_prefix": "web/"})).await;
        assert!(!web.is_empty() && web.iter().all(|p| p.starts_with("web/")), "{tool}: {web:?}");
        assert!(search(tool, json!({"repository": "elsewhere"})).await.is_empty(), "{tool}");
        // Explained, each hit says how its branch found it; as of before the import, nothing.
        let body = json!({"query": "load the configuration config", "project_id": s.project, "explain": true});
        let (_, result) = call(tool, body).await;
        assert_eq!(result["hits"][0]["explanation"]["fused_rank"], 1, "{tool}: {result}");
        let before = json!({"query": "load the configuration config", "project_id": s.project,
                            "as_of": "2000-01-01T00:00:00Z"});
        let (status, result) = call(tool, before).await;
        assert_eq!((status, result["hits"].as_array().map(Vec::len)), (200, Some(0)), "{tool}: {result}");
    }
}

/// A producer's summary anchored to an imported chunk is a memory of its own, and the two spans overlap: a search
/// returns the better of them only.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn memories_anchored_in_overlapping_lines_of_a_file_are_returned_once(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let s = Setup::new(opts, conn).await;
    s.repo.write("src/config.rs", CONFIG_RS);
    s.repo.commit("first");
    let batches = s.plan().batches;
    s.ingest(&batches).await;
    let mut summary = batches[0].clone();
    summary.batch_id = "summary".into();
    summary.memories.truncate(1);
    let m = &mut summary.memories[0];
    assert_eq!(m.anchor.as_ref().unwrap().symbol, "parse_config");
    m.content = "parse_config reads the configuration file and takes the port from its length".into();
    m.anchor.as_mut().unwrap().hash = None;
    m.anchor.as_mut().unwrap().end_line = 4;
    assert_eq!(s.ingest(&[summary]).await, 1, "a summary anchored at a chunk is a memory of its own");

    let retriever = integration_tests::shipped_retriever(&s.db, minilm());
    for strategy in [Strategy::Keyword, Strategy::Vector, Strategy::Hybrid] {
        let request = SearchRequest {
            project_id: Some(s.project),
            max_results: 10,
            ..SearchRequest::new(s.org, strategy, "parse_config reads the configuration file")
        };
        let hits = retriever.search(request).await.unwrap().hits;
        let at_parse =
            hits.iter().filter(|h| h.memory.anchor.as_ref().is_some_and(|a| a.start_line <= 7 && a.end_line >= 3));
        assert_eq!(at_parse.count(), 1, "{strategy:?}: {hits:?}");
    }
    let mut ask = memory_core::retrieval::RetrievalRequest::new(
        s.org,
        memory_core::retrieval::RetrievalMode::AgentQuery,
        "what does parse_config read",
    );
    ask.project_id = Some(s.project);
    let found = retriever.query(ask).await.unwrap().memories;
    let at_parse =
        found.iter().filter(|m| m.memory.anchor.as_ref().is_some_and(|a| a.start_line <= 7 && a.end_line >= 3));
    assert_eq!(at_parse.count(), 1, "{found:?}");
}

/// A scan job reads a bounded number of files and queues the job for the rest with its cursor; the jobs together
/// scan every file once.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_large_scan_pages_through_the_files_with_a_cursor(opts: PgPoolOptions, conn: PgConnectOptions) {
    use memory_core::jobs::FileScanJob;
    let s = Setup::new(opts, conn).await;
    for name in ["a", "B", "c", "d", "e"] {
        s.repo.write(&format!("docs/{name}.md"), &format!("# {name}\n\nAbout {name}.\n"));
    }
    s.repo.commit("five files");
    s.ingest(&s.plan().batches).await;
    let scanner = s.scanner().with_files_per_run(2);
    let mut job = FileScanJob::new(s.org, None);
    let mut scanned = Vec::new();
    for run in 1.. {
        let report = scanner.scan_from(&s.db.app, &job).await.unwrap();
        scanned.push(report.scanned);
        let sql = "DELETE FROM memory_job_outbox WHERE organization_id = $1 AND job_type = 'memory_file_scan' \
                   RETURNING body";
        let queued: Vec<serde_json::Value> = sqlx::query_scalar(sql).bind(s.org).fetch_all(&s.db.admin).await.unwrap();
        match queued.as_slice() {
            [] => break,
            [next] => job = serde_json::from_value(next.clone()).unwrap(),
            more => panic!("run {run} queued {} jobs", more.len()),
        }
        assert!(job.after.is_some(), "the job for the rest carries its cursor");
    }
    assert_eq!(scanned, [2, 2, 1], "two files a run, each once");
    assert!(s.active().await.iter().all(|m| m.last_verified_at.is_some()), "every file scanned");
}

/// Two imports of one commit racing (other batch ids, so no replay) write each chunk once, and a scan job
/// delivered twice queues the job for the rest once.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn racing_imports_write_each_chunk_once_and_a_redelivered_scan_queues_the_rest_once(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    use memory_core::jobs::FileScanJob;
    let s = Setup::new(opts, conn).await;
    s.repo.write("src/config.rs", CONFIG_RS);
    s.repo.write("docs/guide.md", GUIDE_MD);
    s.repo.commit("first");
    let plan = s.plan();
    let mut again = plan.batches.clone();
    for batch in &mut again {
        batch.batch_id.push_str(":again");
    }
    let (a, b) = tokio::join!(s.ingest(&plan.batches), s.ingest(&again));
    assert_eq!(a + b, plan.chunks, "each chunk once");
    assert_eq!(s.active().await.len(), plan.chunks);

    let job = FileScanJob::new(s.org, None);
    let scanner = s.scanner().with_files_per_run(1);
    scanner.scan_from(&s.db.app, &job).await.unwrap();
    scanner.scan_from(&s.db.app, &job).await.unwrap();
    let sql = "SELECT count(*) FROM memory_job_outbox WHERE organization_id = $1 AND job_type = 'memory_file_scan'";
    let queued: i64 = sqlx::query_scalar(sql).bind(s.org).fetch_one(&s.db.admin).await.unwrap();
    assert_eq!(queued, 1);
}
