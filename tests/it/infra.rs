//! The deployment template: clean under cfn-lint, and the invariants a reviewer would check by hand.

use std::collections::BTreeMap;

use serde_json::Value;

const TEMPLATE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/template.yaml");

fn template() -> Value {
    serde_yaml_ng::from_str(&std::fs::read_to_string(TEMPLATE).unwrap()).expect("the template is YAML without tags")
}

fn resources_of(template: &Value, kind: &str) -> BTreeMap<String, Value> {
    template["Resources"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == kind)
        .map(|(name, r)| (name.clone(), r.clone()))
        .collect()
}

/// The logical name a `{"Fn::GetAtt": [Name, Attr]}` or `{"Ref": Name}` points at.
fn target(value: &Value) -> Option<&str> {
    value.get("Fn::GetAtt").and_then(|a| a[0].as_str()).or_else(|| value.get("Ref").and_then(Value::as_str))
}

#[test]
fn the_template_passes_cfn_lint() {
    let lint = std::env::var("MEMORY_CFN_LINT").expect("MEMORY_CFN_LINT (run the tests through `make test`)");
    let output = std::process::Command::new(lint).arg(TEMPLATE).output().expect("cfn-lint runs");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success() && report.trim().is_empty(), "cfn-lint:\n{report}");
}

#[test]
fn every_queue_has_a_dead_letter_queue_an_alarm_and_a_visibility_timeout_six_times_its_functions() {
    let template = template();
    let queues = resources_of(&template, "AWS::SQS::Queue");
    let functions = resources_of(&template, "AWS::Serverless::Function");
    let alarms = resources_of(&template, "AWS::CloudWatch::Alarm");
    let global_timeout = template["Globals"]["Function"]["Timeout"].as_u64().unwrap();
    let work_queues: Vec<&String> = queues.keys().filter(|name| !name.ends_with("DeadLetterQueue")).collect();
    assert_eq!(work_queues.len(), 5, "{work_queues:?}");
    for name in work_queues {
        let queue = &queues[name];
        let redrive = &queue["Properties"]["RedrivePolicy"];
        let dlq = target(&redrive["deadLetterTargetArn"]).unwrap_or_else(|| panic!("{name} has no DLQ"));
        assert!(queues.contains_key(dlq), "{name}: {dlq}");
        assert!(redrive["maxReceiveCount"].as_u64().unwrap() >= 5, "{name}");
        let alarmed = alarms.values().any(|a| target(&a["Properties"]["Dimensions"][0]["Value"]) == Some(dlq));
        assert!(alarmed, "{dlq} has no alarm on its depth");

        let consumers: Vec<(&String, &Value)> = functions
            .iter()
            .flat_map(|(f, r)| r["Properties"]["Events"].as_object().into_iter().flatten().map(move |(_, e)| (f, e)))
            .filter(|(_, e)| e["Type"] == "SQS" && target(&e["Properties"]["Queue"]) == Some(name.as_str()))
            .collect();
        assert_eq!(consumers.len(), 1, "{name} has one consumer");
        let (function, event) = consumers[0];
        let types = event["Properties"]["FunctionResponseTypes"].as_array().cloned().unwrap_or_default();
        assert!(types.contains(&Value::from("ReportBatchItemFailures")), "{function} on {name}");
        let timeout = functions[function]["Properties"]["Timeout"].as_u64().unwrap_or(global_timeout);
        let visibility = queue["Properties"]["VisibilityTimeout"].as_u64().unwrap();
        assert!(visibility >= 6 * timeout, "{name}: visibility {visibility} s for a {timeout} s function");
    }
}

#[test]
fn every_function_has_its_own_role_and_no_data_plane_action_on_every_resource() {
    let template = template();
    let functions = resources_of(&template, "AWS::Serverless::Function");
    assert!(functions.len() >= 8, "{}", functions.len());
    assert_eq!(template["Parameters"]["Architecture"]["Default"], "arm64");
    assert_eq!(template["Globals"]["Function"]["Runtime"], "provided.al2023");
    for (name, function) in &functions {
        assert!(function["Properties"].get("Role").is_none(), "{name} shares a role (SAM gives each its own)");
        for policy in function["Properties"]["Policies"].as_array().unwrap_or_else(|| panic!("{name} has no policies"))
        {
            for statement in policy["Statement"].as_array().into_iter().flatten() {
                let resources: Vec<&Value> = match &statement["Resource"] {
                    Value::Array(list) => list.iter().collect(),
                    other => vec![other],
                };
                assert!(resources.iter().all(|r| *r != "*"), "{name}: {statement}");
            }
        }
    }
    let roles = resources_of(&template, "AWS::IAM::Role");
    for (name, role) in roles {
        let statements = role["Properties"]["Policies"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|p| p["PolicyDocument"]["Statement"].as_array().cloned().unwrap_or_default());
        for statement in statements {
            assert_ne!(statement["Resource"], "*", "{name}: {statement}");
        }
    }
}

/// The list of jobs exists once (`JobType`): each job's queue, worker function, binary and local queue follow it.
#[test]
fn every_job_has_its_queue_worker_function_binary_and_local_queue() {
    use memory_core::jobs::JobType;
    let template = template();
    let queues = resources_of(&template, "AWS::SQS::Queue");
    let functions = resources_of(&template, "AWS::Serverless::Function");
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let read = |path: &str| std::fs::read_to_string(format!("{root}/{path}")).unwrap_or_default();
    let (manifest, local_queues, package) =
        (read("functions/workers/Cargo.toml"), read("scripts/aws_resources.py"), read("scripts/package.sh"));
    assert!(package.contains("-p workers"), "scripts/package.sh builds the workers crate");
    let work_queues = queues.keys().filter(|name| !name.ends_with("DeadLetterQueue")).count();
    assert_eq!(work_queues, JobType::ALL.len(), "one work queue per job type");
    for job in JobType::ALL {
        let function = job.function();
        let queue_name = format!("memory-{function}-${{Stage}}");
        let (queue, _) = queues
            .iter()
            .find(|(_, q)| q["Properties"]["QueueName"]["Fn::Sub"] == queue_name.as_str())
            .unwrap_or_else(|| panic!("the template has no queue {queue_name} for {}", job.as_str()));
        let consumer = functions.iter().find(|(_, f)| {
            f["Properties"]["Events"]
                .as_object()
                .into_iter()
                .flatten()
                .any(|(_, e)| e["Type"] == "SQS" && target(&e["Properties"]["Queue"]) == Some(queue.as_str()))
        });
        let (name, consumer) = consumer.unwrap_or_else(|| panic!("no function consumes {queue}"));
        let code = format!("../target/lambda/{function}/bootstrap.zip");
        assert_eq!(consumer["Properties"]["CodeUri"], code.as_str(), "{name} runs the {function} package");
        for (name, f) in &functions {
            if let Some(value) = f["Properties"]["Environment"]["Variables"].get(job.queue_variable()) {
                assert_eq!(target(value), Some(queue.as_str()), "{name}: {} names {queue}", job.queue_variable());
            }
        }
        assert!(manifest.contains(&format!("name = \"{function}\"")), "functions/workers has no binary {function}");
        let main = read(&format!("functions/workers/src/bin/{function}.rs"));
        assert!(main.contains(&format!("JobType::{job:?}")), "the {function} binary serves {}", job.as_str());
        let local = format!("\"memory-{function}\": \"{}\"", job.queue_variable());
        assert!(local_queues.contains(&local), "scripts/aws_resources.py lacks {local}");
    }
}

/// The retrieve function counts every job queue and its dead-letter queue for `GET /v1/queues`, and can neither
/// receive, delete nor send: reading the queues never takes a message from the workers.
#[test]
fn the_retrieve_function_may_count_every_queue_and_take_no_message() {
    use memory_core::jobs::JobType;
    let template = template();
    let retrieve = &template["Resources"]["RetrieveFunction"]["Properties"];
    let statements: Vec<&Value> = retrieve["Policies"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["Statement"].as_array().into_iter().flatten())
        .collect();
    let actions = |s: &Value| -> Vec<String> {
        match &s["Action"] {
            Value::String(a) => vec![a.clone()],
            Value::Array(a) => a.iter().filter_map(|a| a.as_str().map(String::from)).collect(),
            _ => vec![],
        }
    };
    let sqs: Vec<&&Value> = statements.iter().filter(|s| actions(s).iter().any(|a| a.starts_with("sqs:"))).collect();
    assert_eq!(sqs.len(), 1, "one statement for the queues");
    let mut granted = actions(sqs[0]);
    granted.sort();
    assert_eq!(granted, ["sqs:GetQueueAttributes", "sqs:GetQueueUrl"]);
    let resources: Vec<&str> = sqs[0]["Resource"].as_array().unwrap().iter().filter_map(target).collect();
    let queues = resources_of(&template, "AWS::SQS::Queue");
    assert_eq!(resources.len(), queues.len(), "every queue and dead-letter queue: {resources:?}");
    for queue in queues.keys() {
        assert!(resources.contains(&queue.as_str()), "{queue} is counted");
    }
    let variables = &retrieve["Environment"]["Variables"];
    for job in JobType::ALL {
        assert!(!variables[job.queue_variable()].is_null(), "retrieve is given {}", job.queue_variable());
    }
    for policy in retrieve["Policies"].as_array().unwrap() {
        let templates: Vec<&String> = policy.as_object().map(|m| m.keys().collect()).unwrap_or_default();
        assert!(!templates.iter().any(|p| p.starts_with("SQS")), "no SQS policy template: {templates:?}");
    }
}

/// A new cluster gets a reader instance, and the retrieve function reads through the proxy's read-only endpoint (or
/// the reader endpoint given with an existing database); nothing else reads there.
#[test]
fn the_retrieve_function_reads_through_the_proxys_read_only_endpoint() {
    let template = template();
    let endpoint = &template["Resources"]["DatabaseProxyReaderEndpoint"]["Properties"];
    assert_eq!(endpoint["TargetRole"], "READ_ONLY");
    assert_eq!(target(&endpoint["DBProxyName"]), Some("DatabaseProxy"));
    let instances = resources_of(&template, "AWS::RDS::DBInstance");
    assert_eq!(instances.len(), 2, "a writer and a reader: {:?}", instances.keys());
    for (name, function) in resources_of(&template, "AWS::Serverless::Function") {
        let reader = &function["Properties"]["Environment"]["Variables"]["MEMORY_DATABASE_READER_HOST"];
        if name == "RetrieveFunction" {
            let choice = reader["Fn::If"].as_array().expect("the endpoint by whether the cluster is new");
            assert_eq!(target(&choice[1]), Some("DatabaseProxyReaderEndpoint"));
            assert_eq!(target(&choice[2]), Some("ExistingDatabaseReaderHost"));
        } else {
            assert!(reader.is_null(), "{name} reads and writes on the writer");
        }
    }
}

/// Every function verifies the database's certificate: the CA bundle is a layer of every function and
/// `MEMORY_DB_SSL_ROOT_CERT` names the file `make package` puts in it.
#[test]
fn every_function_verifies_the_database_certificate_against_the_packaged_bundle() {
    let template = template();
    let globals = &template["Globals"]["Function"];
    let bundle = globals["Environment"]["Variables"]["MEMORY_DB_SSL_ROOT_CERT"].as_str().expect("the CA bundle's path");
    let layers = globals["Layers"].as_array().expect("layers every function has");
    let layer = layers.iter().find_map(target).expect("a layer of every function");
    let content = &template["Resources"][layer]["Properties"]["ContentUri"];
    assert_eq!(content, "../target/lambda-layers/rds-ca.zip", "the CA layer is the packaged one");
    let package = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/package.sh")).unwrap();
    let (folder, file) = bundle.strip_prefix("/opt/").and_then(|p| p.split_once('/')).expect("a file under /opt");
    assert!(package.contains(&format!("layer/{folder}/{file}")), "make package writes {bundle} into the layer");
    for (name, function) in resources_of(&template, "AWS::Serverless::Function") {
        let own = &function["Properties"]["Environment"]["Variables"]["MEMORY_DB_SSL_ROOT_CERT"];
        assert!(own.is_null(), "{name} keeps the global CA bundle");
    }
}

/// Connections verify the database: against a TLS front of the local server (answering PostgreSQL's SSLRequest
/// with a certificate for "localhost" from a CA of the test's own, as RDS does with its CA), a pool configured with
/// that CA connects, and refuses a server its CA did not sign or whose certificate names another host.
mod database_tls {
    use std::{path::PathBuf, sync::Arc};

    use memory_core::{config::DatabaseConfig, db};
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    use sqlx::postgres::PgConnectOptions;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls::{self, pki_types::PrivateKeyDer};

    const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

    struct Ca {
        params: CertificateParams,
        key: KeyPair,
    }

    impl Ca {
        fn new() -> Self {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            Self { params, key: KeyPair::generate().unwrap() }
        }

        /// The CA certificate as a PEM file.
        fn file(&self) -> PathBuf {
            let path = std::env::temp_dir().join(format!("memory-test-ca-{}.pem", uuid::Uuid::new_v4()));
            std::fs::write(&path, self.params.clone().self_signed(&self.key).unwrap().pem()).unwrap();
            path
        }
    }

    /// Listens on 127.0.0.1 as a TLS PostgreSQL server presenting a certificate for `localhost` signed by `ca`,
    /// relaying the decrypted protocol to the local server.
    async fn tls_front(ca: &Ca) -> u16 {
        let upstream: PgConnectOptions = std::env::var("MEMORY_ADMIN_DATABASE_URL").unwrap().parse().unwrap();
        let upstream = upstream.get_port();
        let issuer = ca.params.clone().self_signed(&ca.key).unwrap();
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["localhost".to_string()]).unwrap().signed_by(&key, &issuer, &ca.key);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![leaf.unwrap().der().clone()], PrivateKeyDer::Pkcs8(key.serialize_der().into()))
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let mut request = [0u8; 8];
                    if client.read_exact(&mut request).await.is_err() || request != SSL_REQUEST {
                        return; // this front speaks TLS only
                    }
                    client.write_all(b"S").await.ok();
                    let Ok(mut tls) = acceptor.accept(client).await else { return };
                    let mut server = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await.unwrap();
                    tokio::io::copy_bidirectional(&mut tls, &mut server).await.ok();
                });
            }
        });
        port
    }

    /// One query through a pool configured as a deployed function's: the secret's URL (`sslmode=require`) to
    /// `host`, with `ca` as `MEMORY_DB_SSL_ROOT_CERT`.
    async fn query(host: &str, port: u16, ca: Option<PathBuf>) -> Result<i32, sqlx::Error> {
        let url = format!("postgres://postgres@{host}:{port}/postgres?sslmode=require");
        let pool = db::pool(&DatabaseConfig { ssl_root_cert: ca, ..DatabaseConfig::with_url(url.into()).unwrap() });
        sqlx::query_scalar("SELECT 1").fetch_one(&pool.unwrap()).await
    }

    #[tokio::test]
    async fn a_configured_ca_makes_every_connection_verify_the_servers_chain_and_name() {
        let ca = Ca::new();
        let port = tls_front(&ca).await;
        let ours = ca.file();
        assert_eq!(query("localhost", port, Some(ours.clone())).await.unwrap(), 1, "verify-full connects");

        // Without a CA (sslmode=require alone) nothing is verified: the address the certificate does not name connects.
        assert_eq!(query("127.0.0.1", port, None).await.unwrap(), 1);
        let wrong_name =
            query("127.0.0.1", port, Some(ours.clone())).await.expect_err("the certificate names localhost");
        assert!(format!("{wrong_name:?}").contains("NotValidForName"), "{wrong_name:?}");
        let stranger = Ca::new().file();
        let unknown =
            query("localhost", port, Some(stranger.clone())).await.expect_err("a CA that signed nothing here");
        assert!(format!("{unknown:?}").contains("InvalidCertificate"), "{unknown:?}");
        for file in [ours, stranger] {
            std::fs::remove_file(file).ok();
        }

        let url = "postgres://x@localhost/db".to_string().into();
        let missing = DatabaseConfig {
            ssl_root_cert: Some("/nonexistent/ca.pem".into()),
            ..DatabaseConfig::with_url(url).unwrap()
        };
        let refused = db::pool(&missing).expect_err("a CA file that is not there");
        assert!(refused.to_string().contains("MEMORY_DB_SSL_ROOT_CERT"), "{refused}");
    }
}

/// The functions' metrics have a dashboard (its body valid JSON once substituted) and alarms on the p95 latency of
/// passive and agent queries, beside the dead-letter alarms.
#[test]
fn the_dashboard_is_valid_and_retrieval_latency_has_alarms() {
    let template = template();
    let dashboard = &template["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"][0];
    let mut body = dashboard.as_str().expect("a body to substitute").to_string();
    while let Some(start) = body.find("${") {
        let end = start + body[start..].find('}').unwrap();
        body.replace_range(start..=end, "x");
    }
    let body: Value = serde_json::from_str(&body).expect("the dashboard body is JSON");
    assert!(body["widgets"].as_array().unwrap().len() >= 5);
    let alarms = resources_of(&template, "AWS::CloudWatch::Alarm");
    for mode in ["passive", "agent_query"] {
        let on_latency = alarms.values().any(|a| {
            let p = &a["Properties"];
            p["MetricName"] == "retrieval_latency_ms"
                && p["ExtendedStatistic"] == "p95"
                && p["Dimensions"].as_array().unwrap().iter().any(|d| d["Value"] == mode)
        });
        assert!(on_latency, "no p95 latency alarm for {mode}");
    }
}
