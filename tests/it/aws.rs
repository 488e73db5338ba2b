//! The local stack's SQS queues (with dead-letter queues) and event bus, through the real AWS SDK against moto,
//! and the outbox relay publishing to that bus.

use std::{sync::Arc, time::Duration};

use aws_edge::relay::EventBridgeSink;
use integration_tests::{Db, dead_letter, local_aws, memory, queue_with_dead_letters};
use memory_core::{
    outbox::{Budget, OutboxRelay},
    store::{self, transitions},
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

fn bus() -> String {
    std::env::var("MEMORY_EVENT_BUS").unwrap_or_else(|_| "agent-memory".into())
}

#[tokio::test]
async fn every_worker_queue_exists_with_a_dead_letter_queue() {
    let sqs = aws_sdk_sqs::Client::new(&local_aws().await);
    for job in memory_core::jobs::JobType::ALL {
        let name = format!("memory-{}", job.function());
        let url = sqs.get_queue_url().queue_name(&name).send().await.unwrap().queue_url.unwrap();
        let attributes = sqs
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy)
            .send()
            .await
            .unwrap()
            .attributes
            .unwrap();
        let policy = &attributes[&aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy];
        assert!(policy.contains(&format!("{name}-dlq")), "{name}: {policy}");
    }
}

#[tokio::test]
async fn the_event_bus_accepts_domain_events() {
    let events = aws_sdk_eventbridge::Client::new(&local_aws().await);
    let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
        .event_bus_name(bus())
        .source("agent-memory.test")
        .detail_type("memory.superseded")
        .detail(r#"{"memory_id":"00000000-0000-0000-0000-000000000000"}"#)
        .build();
    let output = events.put_events().entries(entry).send().await.unwrap();
    assert_eq!(output.failed_entry_count, 0);
}

async fn unpublished(db: &Db, org: Uuid) -> i64 {
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    sqlx::query_scalar("SELECT count(*) FROM domain_event_outbox WHERE organization_id = $1 AND published_at IS NULL")
        .bind(org)
        .fetch_one(&mut *tx)
        .await
        .unwrap()
}

/// A queue receiving every event of `org` from the bus (through a rule), and its URL.
async fn queue_for_events_of(sdk: &aws_config::SdkConfig, org: Uuid) -> String {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let name = format!("outbox-{}", org.simple());
    let url = sqs.create_queue().queue_name(&name).send().await.unwrap().queue_url.unwrap();
    let arn_name = aws_sdk_sqs::types::QueueAttributeName::QueueArn;
    let attributes = sqs.get_queue_attributes().queue_url(&url).attribute_names(arn_name.clone()).send().await.unwrap();
    let arn = attributes.attributes.unwrap()[&arn_name].clone();
    let events = aws_sdk_eventbridge::Client::new(sdk);
    let pattern = serde_json::json!({"source": [aws_edge::relay::SOURCE], "detail": {"organization_id": [org]}});
    events.put_rule().name(&name).event_bus_name(bus()).event_pattern(pattern.to_string()).send().await.unwrap();
    let target = aws_sdk_eventbridge::types::Target::builder().id("queue").arn(arn).build().unwrap();
    events.put_targets().rule(&name).event_bus_name(bus()).targets(target).send().await.unwrap();
    url
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn outbox_events_reach_the_bus_and_wait_in_the_outbox_while_it_is_unreachable(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let old = memory(org, "old wording").insert(&db).await;
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    let new = transitions::create(&mut tx, &memory(org, "new wording").new, &[old.id]).await.unwrap();
    transitions::supersede(&mut tx, org, old.id, new.id, "test").await.unwrap();
    tx.commit().await.unwrap();
    let mut outbox_ids: Vec<String> = {
        let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
        sqlx::query_scalar("SELECT id::text FROM domain_event_outbox WHERE organization_id = $1")
            .bind(org)
            .fetch_all(&mut *tx)
            .await
            .unwrap()
    };
    outbox_ids.sort();
    assert_eq!(outbox_ids.len(), 2);

    let sdk = local_aws().await;
    let queue = queue_for_events_of(&sdk, org).await;
    let unreachable = aws_sdk_eventbridge::config::Builder::from(&sdk).endpoint_url("http://127.0.0.1:9").build();
    let down = OutboxRelay::new(
        db.app.clone(),
        Arc::new(EventBridgeSink::new(aws_sdk_eventbridge::Client::from_conf(unreachable), bus())),
    );
    assert!(down.flush(org).await.is_err());
    assert_eq!(unpublished(&db, org).await, 2, "nothing is lost while the bus is down");

    let up =
        OutboxRelay::new(db.app.clone(), Arc::new(EventBridgeSink::new(aws_sdk_eventbridge::Client::new(&sdk), bus())));
    assert_eq!(up.flush(org).await.unwrap(), 2);
    assert_eq!(unpublished(&db, org).await, 0);
    assert_eq!(up.sweep().await.unwrap().published, 0, "a published row is not sent again");

    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let mut received = Vec::new();
    for _ in 0..20 {
        let batch = sqs.receive_message().queue_url(&queue).max_number_of_messages(10).send().await.unwrap();
        for message in batch.messages() {
            let event: serde_json::Value = serde_json::from_str(message.body().unwrap()).unwrap();
            assert_eq!(event["source"], aws_edge::relay::SOURCE);
            received.push(event["detail"]["outbox_id"].as_str().unwrap().to_string());
        }
        if received.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    received.sort();
    assert_eq!(received, outbox_ids);
}

/// The bus as the relay sees it, slowed down, recording each publish call's start, end and events.
struct RecordingBus {
    bus: EventBridgeSink,
    calls: std::sync::Mutex<Vec<(std::time::Instant, std::time::Instant, Vec<Uuid>)>>,
}

#[async_trait::async_trait]
impl memory_core::outbox::EventSink for RecordingBus {
    async fn publish(&self, events: &[store::outbox::OutboxEvent]) -> anyhow::Result<Vec<bool>> {
        let start = std::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(40)).await;
        let accepted = self.bus.publish(events).await;
        let ids = events.iter().map(|e| e.id).collect();
        self.calls.lock().unwrap().push((start, std::time::Instant::now(), ids));
        accepted
    }
}

/// Two relays flushing one organisation at once (a worker's flush and the sweep) publish its events one batch at
/// a time, oldest first, so a consumer sees them in the order they happened.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn two_relays_publish_an_organisations_events_one_batch_at_a_time_in_order(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    for i in 0..25 {
        let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
        transitions::create(&mut tx, &memory(org, &format!("fact {i}")).new, &[]).await.unwrap();
        tx.commit().await.unwrap();
    }
    let written: Vec<Uuid> = {
        let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
        sqlx::query_scalar("SELECT id FROM domain_event_outbox WHERE organization_id = $1 ORDER BY created_at, id")
            .bind(org)
            .fetch_all(&mut *tx)
            .await
            .unwrap()
    };
    let sdk = local_aws().await;
    let bus = Arc::new(RecordingBus {
        bus: EventBridgeSink::new(aws_sdk_eventbridge::Client::new(&sdk), bus()),
        calls: Default::default(),
    });
    let (first, second) =
        (OutboxRelay::new(db.app.clone(), bus.clone()), OutboxRelay::new(db.app.clone(), bus.clone()));

    let (a, b) = tokio::join!(first.flush(org), second.flush(org));
    assert_eq!(a.unwrap() + b.unwrap(), 25);

    let mut calls = bus.calls.lock().unwrap().clone();
    calls.sort_by_key(|(start, _, _)| *start);
    for pair in calls.windows(2) {
        assert!(pair[1].0 >= pair[0].1, "two publish calls for one organisation overlapped");
    }
    let published: Vec<Uuid> = calls.into_iter().flat_map(|(_, _, ids)| ids).collect();
    assert_eq!(published, written, "published in the order written");
}

/// A worker's relay stops claiming once its budget is spent: behind a slow bus it publishes part of a backlog, in
/// order, and returns; the next flush goes on from there, and every event is published once, in the order written.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_relay_within_a_budget_leaves_the_rest_of_a_backlog_in_order(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    for i in 0..60 {
        let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
        transitions::create(&mut tx, &memory(org, &format!("fact {i}")).new, &[]).await.unwrap();
        tx.commit().await.unwrap();
    }
    let sdk = local_aws().await;
    let bus = Arc::new(RecordingBus {
        bus: EventBridgeSink::new(aws_sdk_eventbridge::Client::new(&sdk), bus()),
        calls: Default::default(),
    });
    let relay = OutboxRelay::new(db.app.clone(), bus.clone());
    let started = std::time::Instant::now();
    let first = relay.flush_within(org, Budget::new(Duration::from_millis(100), usize::MAX)).await.unwrap();
    assert!(first > 0 && first < 60, "{first} of 60 within the budget");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(unpublished(&db, org).await, 60 - first as i64);
    assert_eq!(relay.flush(org).await.unwrap(), 60 - first);
    let published: Vec<Uuid> = bus.calls.lock().unwrap().iter().flat_map(|(_, _, ids)| ids.clone()).collect();
    let written: Vec<Uuid> = {
        let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
        sqlx::query_scalar("SELECT id FROM domain_event_outbox WHERE organization_id = $1 ORDER BY seq")
            .bind(org)
            .fetch_all(&mut *tx)
            .await
            .unwrap()
    };
    assert_eq!(published, written, "each once, in the order written");
}

/// A relay sends the jobs whose queues it has and leaves the others to the sweep: jobs it cannot send do not
/// hold back the ones it can.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_relay_sends_the_jobs_it_has_queues_for_and_leaves_the_rest(opts: PgPoolOptions, conn: PgConnectOptions) {
    use memory_core::jobs::{ContradictionCheckJob, FileScanJob, JobType};
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    for _ in 0..12 {
        let scan = FileScanJob::new(org, None);
        store::jobs::enqueue(&mut *tx, org, JobType::MemoryFileScan, serde_json::to_value(scan).unwrap())
            .await
            .unwrap();
    }
    let check = ContradictionCheckJob::new(org, Uuid::now_v7());
    let body = serde_json::to_value(&check).unwrap();
    store::jobs::enqueue(&mut *tx, org, JobType::MemoryContradictionCheck, body.clone()).await.unwrap();
    tx.commit().await.unwrap();

    let sdk = local_aws().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let name = format!("t-{}-contradiction", org.simple());
    let url = sqs.create_queue().queue_name(name).send().await.unwrap().queue_url.unwrap();
    let queues = std::collections::HashMap::from([(JobType::MemoryContradictionCheck, url.clone())]);
    let relay =
        OutboxRelay::new(db.app.clone(), Arc::new(EventBridgeSink::new(aws_sdk_eventbridge::Client::new(&sdk), bus())))
            .with_jobs(Arc::new(aws_edge::relay::SqsJobSink::new(sqs.clone(), queues)));

    relay.flush(org).await.unwrap();

    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    let unsent = store::jobs::unsent_counts(&mut *tx, org).await.unwrap();
    assert_eq!(unsent, vec![("memory_file_scan".to_string(), 12)], "only the jobs without a queue wait");
    let received = sqs.receive_message().queue_url(&url).max_number_of_messages(10).send().await.unwrap();
    let bodies: Vec<serde_json::Value> =
        received.messages().iter().map(|m| serde_json::from_str(m.body().unwrap()).unwrap()).collect();
    assert_eq!(bodies, vec![body]);
}

/// A message a worker failed until SQS gave up is listed on the dead-letter queue with its receive count, and
/// `redrive` sends it back to its queue.
#[tokio::test]
async fn dead_letters_are_listed_and_sent_back_to_their_queue() {
    use aws_edge::dead_letters;
    let sdk = local_aws().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let (queue, dlq) = queue_with_dead_letters(&sqs).await;
    dead_letter(&sqs, &queue, r#"{"poison": true}"#).await;
    assert_eq!(dead_letters::queue_of(&sqs, &queue).await.unwrap().as_deref(), Some(dlq.as_str()));

    let listed = dead_letters::list(&sqs, &dlq).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].body, r#"{"poison": true}"#);
    assert!(listed[0].receive_count >= 2, "{listed:?}");
    assert_eq!(dead_letters::list(&sqs, &dlq).await.unwrap().len(), 1, "listing leaves it there");
    assert_eq!(dead_letters::redrive(&sqs, &dlq, &queue).await.unwrap(), 1);
    let back = sqs.receive_message().queue_url(&queue).send().await.unwrap();
    assert_eq!(back.messages()[0].body(), Some(r#"{"poison": true}"#));
}

/// `GET /v1/queues` gives the deployment's operator each job queue's depth and dead-letter count (what
/// `memory-admin jobs status` prints); an organisation's operator, who would learn of other organisations'
/// failures from them, is refused, and no message is received by the reading (the workers still see it).
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_deployment_operator_sees_the_queues_dead_letters_and_an_organisations_operator_does_not(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    use memory_core::jobs::JobType;
    let db = Db::new(opts, conn).await;
    let sqs = aws_sdk_sqs::Client::new(&local_aws().await);
    let (queue, _) = queue_with_dead_letters(&sqs).await;
    dead_letter(&sqs, &queue, r#"{"organization_id": "0a000000-0000-4000-8000-000000000001"}"#).await;
    sqs.send_message().queue_url(&queue).message_body("{}").send().await.unwrap();
    let plain = sqs.create_queue().queue_name(format!("t-{}", Uuid::now_v7().simple())).send().await.unwrap();
    let queues = retrieve::queues::Queues::of([
        (JobType::MemoryDedupReview, queue.clone()),
        (JobType::MemoryFileScan, plain.queue_url.unwrap()),
    ]);
    let embedder = Arc::new(integration_tests::FixedEmbedder::default());
    let state = integration_tests::local_state(integration_tests::retriever(&db, embedder, None)).with_queues(queues);
    let app = retrieve::app(state);
    let ask = |token: String| {
        let request = axum::http::Request::get("/v1/queues")
            .header("authorization", format!("Bearer {token}"))
            .body(axum::body::Body::empty())
            .unwrap();
        let app = app.clone();
        async move {
            let response = tower::ServiceExt::oneshot(app, request).await.unwrap();
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
            (status, serde_json::from_slice::<serde_json::Value>(&body).unwrap())
        }
    };
    let org = Uuid::now_v7();

    let (status, view) = ask(integration_tests::local_token(org, None, Some("memory:deployment"))).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(
        view["queues"],
        serde_json::json!([
            {"job": "memory_dedup_review", "waiting": 1, "in_flight": 0, "dead": 1},
            {"job": "memory_file_scan", "waiting": 0, "in_flight": 0, "dead": null},
        ]),
        "{view}"
    );
    assert_eq!(
        view["not_configured"],
        serde_json::json!(["memory_ingest", "memory_contradiction_check", "memory_entity_synthesis"])
    );
    let waiting = sqs.receive_message().queue_url(&queue).send().await.unwrap();
    assert_eq!(waiting.messages().len(), 1, "counting received nothing");

    for scope in [Some("memory:operator"), None] {
        let (status, refusal) = ask(integration_tests::local_token(org, None, scope)).await;
        assert_eq!(status, 403, "{scope:?}: {refusal}");
        assert!(refusal["error"]["message"].as_str().unwrap().contains("memory:deployment"), "{refusal}");
        assert!(refusal.get("queues").is_none());
    }
}

/// After a forget, `purge` deletes the dead-letter messages of that organisation (they may quote what was forgotten)
/// and leaves every other message, visible again.
#[tokio::test]
async fn an_organisations_dead_letters_are_purged_and_the_others_stay() {
    use aws_edge::dead_letters;
    let sqs = aws_sdk_sqs::Client::new(&local_aws().await);
    let dlq = sqs.create_queue().queue_name(format!("t-{}-dlq", Uuid::now_v7().simple())).send().await.unwrap();
    let dlq = dlq.queue_url.unwrap();
    let (forgotten, other) = (Uuid::now_v7(), Uuid::now_v7());
    let bodies = [
        serde_json::json!({"organization_id": forgotten, "batch_id": "b1", "memories": [{"content": "quokka"}]}),
        serde_json::json!({"organization_id": forgotten.to_string().to_uppercase(), "job_type": "memory_forget"}),
        serde_json::json!({"organization_id": other, "batch_id": "b2", "memories": []}),
    ];
    for body in &bodies {
        sqs.send_message().queue_url(&dlq).message_body(body.to_string()).send().await.unwrap();
    }
    sqs.send_message().queue_url(&dlq).message_body("not json").send().await.unwrap();
    assert_eq!(dead_letters::purge(&sqs, &dlq, forgotten).await.unwrap(), 2);
    let mut left: Vec<String> = dead_letters::list(&sqs, &dlq).await.unwrap().into_iter().map(|m| m.body).collect();
    left.sort();
    assert_eq!(left, vec!["not json".to_string(), bodies[2].to_string()]);
}

/// A bus that takes 40 ms a call and accepts everything.
struct SlowBus;

#[async_trait::async_trait]
impl memory_core::outbox::EventSink for SlowBus {
    async fn publish(&self, events: &[store::outbox::OutboxEvent]) -> anyhow::Result<Vec<bool>> {
        tokio::time::sleep(Duration::from_millis(40)).await;
        Ok(vec![true; events.len()])
    }
}

/// A sweep gives each organisation a bounded time and stops taking new ones once its own is spent: an
/// organisation's backlog is relayed over several sweeps, visited first by each next one, and another organisation
/// is not held behind it.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_backlog_is_relayed_over_several_sweeps_each_bounded(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let (backlogged, small) = (Uuid::now_v7(), Uuid::now_v7());
    for (org, events) in [(backlogged, 80), (small, 5)] {
        let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
        for i in 0..events {
            transitions::create(&mut tx, &memory(org, &format!("fact {i}")).new, &[]).await.unwrap();
        }
        tx.commit().await.unwrap();
    }
    let unpublished = async |org: Uuid| -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM domain_event_outbox WHERE organization_id = $1 AND published_at IS NULL",
        )
        .bind(org)
        .fetch_one(&db.admin)
        .await
        .unwrap()
    };
    let relay = OutboxRelay::new(db.app.clone(), Arc::new(SlowBus)).with_sweep_budget(
        Duration::from_secs(5),
        Duration::from_millis(150),
        usize::MAX,
    );

    let started = std::time::Instant::now();
    let first = relay.sweep().await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(1500), "two bounded visits: {:?}", started.elapsed());
    assert_eq!(first.unfinished_organizations, 1, "{first:?}");
    assert!(unpublished(backlogged).await > 0, "the backlog outlasts one visit");
    assert_eq!(unpublished(small).await, 0, "the other organisation is relayed in the same sweep");

    // The next sweeps take the backlogged organisation first, until it is done.
    let (mut sweeps, mut report) = (1, first);
    while report.unfinished_organizations > 0 {
        report = relay.clone().with_sweep_organizations(1).sweep().await.unwrap();
        sweeps += 1;
        assert!(sweeps < 20, "the backlog is relayed in the end");
    }
    assert!(sweeps > 2, "{sweeps} sweeps");
    assert_eq!(unpublished(backlogged).await, 0);
}

/// A bus that accepts every event at once and records them in the order it accepted them.
#[derive(Default)]
struct InstantBus(std::sync::Mutex<Vec<Uuid>>);

#[async_trait::async_trait]
impl memory_core::outbox::EventSink for InstantBus {
    async fn publish(&self, events: &[store::outbox::OutboxEvent]) -> anyhow::Result<Vec<bool>> {
        self.0.lock().unwrap().extend(events.iter().map(|e| e.id));
        Ok(vec![true; events.len()])
    }
}

/// A backlog of 100,000 events (a large import or forget) while the bus refuses every call, then once it is back:
/// each sweep and worker flush ends within its budget of time and rows, nothing is lost while the bus is down, and
/// the backlog drains over several sweeps, every event published once and in the order it was written. The bus
/// that comes back accepts at once (the local EventBridge relays about 20 events a second, which would time the
/// test, not the relay).
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_backlog_of_100000_events_drains_over_bounded_sweeps_after_the_bus_refused_it(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    const BACKLOG: i64 = 100_000;
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    sqlx::query(
        "INSERT INTO domain_event_outbox (organization_id, id, event_type, payload) \
         SELECT $1, uuidv7(), 'memory.forgotten', jsonb_build_object('memory_id', uuidv7(), 'n', i) \
         FROM generate_series(1, $2) i",
    )
    .bind(org)
    .bind(BACKLOG)
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let written: Vec<Uuid> =
        sqlx::query_scalar("SELECT id FROM domain_event_outbox WHERE organization_id = $1 ORDER BY seq")
            .bind(org)
            .fetch_all(&db.admin)
            .await
            .unwrap();

    let sdk = local_aws().await;
    let (sweep, rows) = (Duration::from_secs(10), 20_000);
    let slack = Duration::from_secs(5);
    let refused = aws_sdk_eventbridge::config::Builder::from(&sdk).endpoint_url("http://127.0.0.1:9").build();
    let down = OutboxRelay::new(
        db.app.clone(),
        Arc::new(EventBridgeSink::new(aws_sdk_eventbridge::Client::from_conf(refused), bus())),
    )
    .with_sweep_budget(sweep, sweep, rows);
    for _ in 0..2 {
        let started = std::time::Instant::now();
        let report = down.sweep().await.unwrap();
        assert!(started.elapsed() < sweep + slack, "a sweep against a refusing bus took {:?}", started.elapsed());
        assert_eq!((report.published, report.failed_organizations), (0, 1), "{report:?}");
        assert_eq!(unpublished(&db, org).await, BACKLOG, "nothing is lost while the bus refuses");
    }

    let bus = Arc::new(InstantBus::default());
    let up = OutboxRelay::new(db.app.clone(), bus.clone()).with_sweep_budget(sweep, sweep, rows);
    // A worker's flush relays at most its rows, whatever the backlog.
    let flushed = up.flush_within(org, Budget::new(Duration::from_secs(60), 1_000)).await.unwrap();
    assert!(
        (1_000..1_000 + memory_core::outbox::BATCH as usize).contains(&flushed),
        "a worker's flush relayed {flushed}"
    );
    let mut sweeps = 0;
    loop {
        let started = std::time::Instant::now();
        let report = up.sweep().await.unwrap();
        sweeps += 1;
        assert!(started.elapsed() < sweep + slack, "sweep {sweeps} took {:?}", started.elapsed());
        assert!(report.published < rows + memory_core::outbox::BATCH as usize, "sweep {sweeps}: {report:?}");
        assert_eq!(report.failed_organizations, 0, "{report:?}");
        if report.unfinished_organizations == 0 {
            break;
        }
        assert!(sweeps < 100, "the backlog drains in the end");
    }
    assert!(sweeps >= 5, "{BACKLOG} events over sweeps of {rows} rows: {sweeps}");
    assert_eq!(unpublished(&db, org).await, 0);
    assert_eq!(*bus.0.lock().unwrap(), written, "every event published once, in the order it was written");
}
