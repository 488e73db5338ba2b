//! The fault-injecting proxy `make soak` puts between the services and the local AWS endpoints, so the bus and the
//! queues fail as they do in production. Each operation's calls (`AmazonSQS.ReceiveMessage`, `AWSEvents.PutEvents`,
//! ...) take their turn in a fixed cycle of [`CYCLE`]: one starts an outage of that operation for [`OUTAGE_FOR`]
//! (every call dropped, the connection closed without an answer, until it ends: longer than the relay's call
//! timeout, so the SDK's retries fail too), one is dropped alone, four are throttled (503 `ThrottlingException`,
//! which the SDK retries) and two lose their answer (applied upstream, answered after [`LOST_FOR`], past the
//! relay's timeout, so the relay sends it again; the workers' pollers, which wait longer, get it late). It also
//! notes, from the calls that reached the queues, every job outbox row whose message a queue took and every one a
//! consumer deleted (acknowledged, having applied it), by the message's `outbox_id` attribute. `GET /__report`
//! answers both.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use aws_edge::relay::OUTBOX_ID;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, body::Bytes, service::service_fn};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::{TokioExecutor, TokioIo},
};
use serde::Serialize;
use serde_json::Value;

const CYCLE: u64 = 50;
const OUTAGE_FOR: Duration = Duration::from_secs(aws_edge::relay::CALL_TIMEOUT.as_secs() + 1);
/// How long an answer is held when it is lost.
const LOST_FOR: Duration = OUTAGE_FOR;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    Passed,
    Dropped,
    Throttled,
    Lost,
}

/// One operation's calls so far, and the end of its outage.
#[derive(Default)]
struct Operation {
    calls: u64,
    down_until: Option<Instant>,
}

impl Operation {
    /// The fault the next call meets.
    fn next(&mut self) -> Fault {
        let now = Instant::now();
        let n = self.calls;
        self.calls += 1;
        if self.down_until.is_some_and(|end| now < end) {
            return Fault::Dropped;
        }
        match n % CYCLE {
            3 => {
                self.down_until = Some(now + OUTAGE_FOR);
                Fault::Dropped
            }
            25 => Fault::Dropped,
            10 | 20 | 30 | 40 => Fault::Throttled,
            15 | 35 => Fault::Lost,
            _ => Fault::Passed,
        }
    }
}

/// What the proxy did and saw.
#[derive(Default, Serialize, serde::Deserialize)]
pub struct Report {
    /// Per operation, how many calls met each fault.
    pub faults: BTreeMap<String, BTreeMap<Fault, u64>>,
    /// The job outbox rows (their `outbox_id` attribute) whose message a queue took.
    pub sent: BTreeSet<String>,
    /// The job outbox rows whose message a consumer deleted.
    pub acknowledged: BTreeSet<String>,
    /// Per message id, the outbox row it was sent from.
    #[serde(skip)]
    rows: HashMap<String, String>,
    /// Per receipt handle, the message it was given for.
    #[serde(skip)]
    receipts: HashMap<String, String>,
}

struct Proxy {
    client: Client<HttpConnector, Full<Bytes>>,
    upstream: String,
    operations: Mutex<BTreeMap<String, Operation>>,
    report: Mutex<Report>,
}

/// Serves until the process is stopped.
pub async fn serve(listen: SocketAddr, upstream: String) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let proxy = Arc::new(Proxy {
        client: Client::builder(TokioExecutor::new()).build_http(),
        upstream: upstream.trim_end_matches('/').to_string(),
        operations: Mutex::default(),
        report: Mutex::default(),
    });
    eprintln!("[proxy] {listen} -> {}", proxy.upstream);
    loop {
        let (stream, _) = listener.accept().await?;
        let proxy = proxy.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let proxy = proxy.clone();
                async move { proxy.handle(request).await }
            });
            // A dropped call ends its connection with an error: nothing to report.
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

impl Proxy {
    async fn handle(&self, request: Request<hyper::body::Incoming>) -> anyhow::Result<Response<Full<Bytes>>> {
        if request.uri().path() == "/__report" {
            let report = serde_json::to_vec(&*self.report.lock().expect("report"))?;
            return Ok(Response::new(Full::new(Bytes::from(report))));
        }
        let (parts, body) = request.into_parts();
        let body = body.collect().await?.to_bytes();
        let operation = operation(&parts.headers, &body);
        let fault = self.operations.lock().expect("operations").entry(operation.clone()).or_default().next();
        *self.report.lock().expect("report").faults.entry(operation.clone()).or_default().entry(fault).or_default() +=
            1;
        match fault {
            Fault::Dropped => anyhow::bail!("{operation}: dropped"),
            Fault::Throttled => {
                let content_type = parts.headers.get("content-type").cloned();
                let mut answer =
                    Response::builder().status(503).header("x-amzn-query-error", "ThrottlingException;Sender");
                if let Some(content_type) = content_type {
                    answer = answer.header("content-type", content_type);
                }
                let error =
                    serde_json::json!({"__type": "ThrottlingException", "message": "Rate exceeded (soak proxy)"});
                Ok(answer.body(Full::new(Bytes::from(error.to_string())))?)
            }
            Fault::Passed | Fault::Lost => {
                let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                let mut forward = Request::builder().method(parts.method).uri(format!("{}{path}", self.upstream));
                for (name, value) in &parts.headers {
                    forward = forward.header(name, value);
                }
                let answer = self.client.request(forward.body(Full::new(body.clone()))?).await?;
                let (parts, answer) = answer.into_parts();
                let answer = answer.collect().await?.to_bytes();
                if parts.status.is_success() {
                    self.report.lock().expect("report").observe(&operation, &body, &answer);
                }
                if fault == Fault::Lost {
                    tokio::time::sleep(LOST_FOR).await;
                }
                Ok(Response::from_parts(parts, Full::new(answer)))
            }
        }
    }
}

impl Report {
    /// Notes the messages a successful queue call took, handed out or had deleted.
    fn observe(&mut self, operation: &str, request: &[u8], answer: &[u8]) {
        let (Ok(request), Ok(answer)) =
            (serde_json::from_slice::<Value>(request), serde_json::from_slice::<Value>(answer))
        else {
            return;
        };
        let entries = |value: &Value, key: &str| value[key].as_array().cloned().unwrap_or_default();
        // The batch entries a queue answered as done, by their ids.
        let done = |request: &Value| -> Vec<Value> {
            let ids: BTreeSet<String> =
                entries(&answer, "Successful").iter().filter_map(|e| e["Id"].as_str().map(String::from)).collect();
            entries(request, "Entries")
                .into_iter()
                .filter(|e| e["Id"].as_str().is_some_and(|id| ids.contains(id)))
                .collect()
        };
        let text = |value: &Value| value.as_str().map(String::from);
        match operation {
            "AmazonSQS.SendMessageBatch" => {
                let rows: HashMap<String, String> = entries(&request, "Entries")
                    .iter()
                    .filter_map(|e| Some((text(&e["Id"])?, text(&e["MessageAttributes"][OUTBOX_ID]["StringValue"])?)))
                    .collect();
                for taken in entries(&answer, "Successful") {
                    if let (Some(row), Some(message)) =
                        (text(&taken["Id"]).and_then(|id| rows.get(&id)), text(&taken["MessageId"]))
                    {
                        self.sent.insert(row.clone());
                        self.rows.insert(message, row.clone());
                    }
                }
            }
            "AmazonSQS.ReceiveMessage" => {
                for message in entries(&answer, "Messages") {
                    if let (Some(handle), Some(id)) = (text(&message["ReceiptHandle"]), text(&message["MessageId"])) {
                        self.receipts.insert(handle, id);
                    }
                }
            }
            "AmazonSQS.DeleteMessage" => self.acknowledge(&request),
            "AmazonSQS.DeleteMessageBatch" => done(&request).iter().for_each(|e| self.acknowledge(e)),
            _ => {}
        }
    }

    fn acknowledge(&mut self, entry: &Value) {
        let message = entry["ReceiptHandle"].as_str().and_then(|h| self.receipts.get(h));
        if let Some(row) = message.and_then(|m| self.rows.get(m)) {
            self.acknowledged.insert(row.clone());
        }
    }
}

/// The AWS operation a call names: its JSON protocol target, or its query protocol action.
fn operation(headers: &hyper::HeaderMap, body: &[u8]) -> String {
    if let Some(target) = headers.get("x-amz-target").and_then(|t| t.to_str().ok()) {
        return target.to_string();
    }
    let body = String::from_utf8_lossy(body);
    body.split('&').find_map(|pair| pair.strip_prefix("Action=")).unwrap_or("other").to_string()
}

/// What the proxy at `address` has done and seen so far.
pub async fn report(address: &str) -> anyhow::Result<Report> {
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let answer = client.get(format!("http://{address}/__report").parse()?).await?;
    Ok(serde_json::from_slice(&answer.into_body().collect().await?.to_bytes())?)
}
