//! The console in a real browser: headless Chromium (Debian's package; `MEMORY_CHROMIUM` names it, the stack's
//! environment sets it) loads `GET /console` from the API served on loopback, asks as the fragment says, and the
//! test reads the page it rendered. Each view's screenshot is written under the target directory and named in the
//! output.

use std::{path::PathBuf, sync::Arc};

use chrono::{DateTime, Utc};
use integration_tests::{
    Db, FixedEmbedder, axis, contradicted_by, dead_letter, local_aws, local_state, local_token, memory,
    queue_with_dead_letters, retriever, vector_with_similarity,
};
use memory_core::{
    lifecycle::synthesis::EntitySynthesizer,
    llm::{InvocationPurpose, ScriptedLlm},
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

const QUERY: &str = "when does billing-api deploy";

fn chromium() -> String {
    std::env::var("MEMORY_CHROMIUM").unwrap_or_else(|_| "chromium".into())
}

/// Where the screenshots go.
fn screenshots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The page at `url` as the browser left it once its scripts were done, and its screenshot as `name`.png.
async fn rendered(url: &str, name: &str) -> String {
    let flags =
        ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=15000", "--window-size=1200,900"];
    let run = |extra: String| {
        let mut command = tokio::process::Command::new(chromium());
        command.args(flags).arg(extra).arg(url).kill_on_drop(true);
        command
    };
    let dom = run("--dump-dom".into()).output().await.expect("chromium runs (MEMORY_CHROMIUM, or chromium on PATH)");
    assert!(dom.status.success(), "chromium failed: {}", String::from_utf8_lossy(&dom.stderr));
    let shot = screenshots().join(format!("{name}.png"));
    let taken = run(format!("--screenshot={}", shot.display())).output().await.unwrap();
    assert!(taken.status.success() && shot.exists(), "no screenshot: {}", String::from_utf8_lossy(&taken.stderr));
    println!("console view {name}: {}", shot.display());
    String::from_utf8(dom.stdout).unwrap()
}

/// The text of the elements of `dom` between `start` and the next `end`, tags dropped.
fn between<'a>(dom: &'a str, start: &str, end: &str) -> &'a str {
    let from = dom.find(start).unwrap_or_else(|| panic!("{start} in the page:\n{dom}"));
    let rest = &dom[from..];
    &rest[..rest.find(end).unwrap_or(rest.len())]
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_console_shows_an_explained_answer_a_memory_and_an_earlier_time_in_a_real_browser(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let tuesday = memory(org, "billing-api deploys on Tuesdays").embedding(axis(0)).insert(&db).await;
    memory(org, "lunch is at noon").embedding(vector_with_similarity(0.3, 5)).insert(&db).await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let before: DateTime<Utc> = Utc::now();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let (thursday, entity) = contradicted_by(&db, &tuesday, "billing-api", "billing-api deploys on Thursdays").await;
    let summary = "billing-api: the payments service; deploys on Thursdays";
    let llm = Arc::new(ScriptedLlm::new().on(InvocationPurpose::MemorySynthesis, move |_| Ok(summary.into())));
    EntitySynthesizer::new(llm, None).synthesize_profile(&db.app, org, entity).await.unwrap();

    let embedder = Arc::new(FixedEmbedder::default().with(QUERY, axis(0)));
    // One job queue with a dead letter, for the deployment operator's view.
    let sqs = aws_sdk_sqs::Client::new(&local_aws().await);
    let (queue, _) = queue_with_dead_letters(&sqs).await;
    dead_letter(&sqs, &queue, "{}").await;
    let queues = retrieve::queues::Queues::of([(memory_core::jobs::JobType::MemoryEntitySynthesis, queue)]);
    let app = retrieve::app(local_state(retriever(&db, embedder, None)).with_queues(queues));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let token = local_token(org, None, None);
    let question = |extra: &str| {
        let q = QUERY.replace(' ', "+");
        format!("{base}/console#token={token}&how=mode:agent_query&q={q}&n=5{extra}")
    };

    // An explained answer: the current fact first, each result's evidence drawn, the request's trace.
    let page = rendered(&question(""), "answer").await;
    assert!(page.contains(r#"data-ready="true""#), "the page finished:\n{page}");
    let results = between(&page, r#"<ol id="results">"#, "</ol>");
    let first = between(results, "<li", "</li>");
    assert!(first.contains("billing-api deploys on Thursdays"), "{results}");
    assert!(!results.contains("on Tuesdays"), "superseded now: {results}");
    for drawn in [r#"data-feature="relevance""#, r#"data-feature="recency""#, "vector #", "keyword #"] {
        assert!(first.contains(drawn), "{drawn} drawn: {first}");
    }
    let recency = between(first, r#"data-feature="recency""#, "</div>");
    assert!(recency.contains(r#"style="width: 100%;""#), "a new memory's recency bar is full: {recency}");
    let trace = between(&page, r#"<div id="trace">"#, "</dl>");
    for said in ["blend", "candidates", "left out", "record", "fixed, ranking"] {
        assert!(trace.contains(said), "{said} in the trace: {trace}");
    }

    // The same question as of before Thursday was written: Tuesday, then active.
    let page = rendered(
        &question(&format!("&as_of={}", before.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))),
        "as-of",
    )
    .await;
    let results = between(&page, r#"<ol id="results">"#, "</ol>");
    assert!(results.contains("billing-api deploys on Tuesdays") && !results.contains("Thursdays"), "{results}");

    // Keyword search: the hit and its evidence in the branch.
    let page = rendered(&format!("{base}/console#token={token}&how=strategy:keyword&q=Thursdays"), "search").await;
    let results = between(&page, r#"<ol id="results">"#, "</ol>");
    assert!(results.contains("billing-api deploys on Thursdays") && results.contains("keyword #1"), "{results}");

    // A memory: its provenance and its chain as a timeline.
    let page = rendered(&format!("{base}/console#token={token}&memory={}", tuesday.id), "memory").await;
    let body = between(&page, r#"<div id="memory-body">"#, "</dl>");
    assert!(body.contains("superseded") && body.contains("explicit"), "{body}");
    let chain = between(&page, r#"<ol id="chain""#, "</ol>");
    let (old, new) = (chain.find("on Tuesdays").expect("the old fact"), chain.find("on Thursdays").expect("the new"));
    assert!(old < new, "oldest first: {chain}");
    let profiles = between(&page, r#"<div id="memory-profiles">"#, "</div>");
    assert!(profiles.contains(summary) && profiles.contains("billing-api"), "its entity's profile: {profiles}");

    // The operator's view: a decision a job held, and the same page refused to a token without the scope.
    let mut tx = memory_core::store::begin_for_org(&db.app, org).await.unwrap();
    let why = "trust: the newer memory is less trusted";
    memory_core::store::held::hold(&mut *tx, org, "contradiction", "supersede", thursday.id, tuesday.id, why)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let operator = local_token(org, None, Some("memory:operator"));
    let page = rendered(&format!("{base}/console#token={operator}&review=1"), "review").await;
    let held = between(&page, r#"<table id="held">"#, "</table>");
    assert!(held.contains(why) && held.contains(&thursday.id.to_string()), "{held}");
    let queues = between(&page, r#"<table id="queues">"#, "</table>");
    assert!(!queues.contains("memory_entity_synthesis"), "the queues are not an organisation's: {queues}");
    assert!(between(&page, r#"<p id="queues-note""#, "</p>").contains("403"), "{page}");
    // The deployment's operator: each queue's dead letters, and no organisation's review.
    let deployment = local_token(org, None, Some("memory:deployment"));
    let page = rendered(&format!("{base}/console#token={deployment}&review=1"), "review-queues").await;
    let synthesis = between(&page, r#"<tr class="dead""#, "</tr>");
    assert!(synthesis.contains("memory_entity_synthesis") && synthesis.contains("<td>1</td>"), "{synthesis}");
    assert!(!page.contains(why), "the deployment scope reads no organisation's review");
    let stranger = local_token(Uuid::now_v7(), None, Some("memory:operator"));
    let page = rendered(&format!("{base}/console#token={stranger}&review=1"), "review-other-organisation").await;
    assert!(!page.contains(why), "another organisation's operator sees none of it");
    let page = rendered(&format!("{base}/console#token={token}&review=1"), "review-refused").await;
    assert!(between(&page, r#"<section id="status""#, "</section>").contains("403"), "{page}");

    // A wrong token: the API's refusal on the page, no answer.
    let page = rendered(&format!("{base}/console#token=not-a-token&how=mode:agent_query&q=x"), "refused").await;
    assert!(between(&page, r#"<section id="status""#, "</section>").contains("401"), "{page}");
}
