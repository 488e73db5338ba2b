//! The demo agents of both organisations reading through the API while the lifecycle runs.

use std::{collections::HashMap, time::Duration};

use anyhow::Context;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use memory_core::domain::Memory;
use memory_tools::{
    demo,
    oracle::{self, Principal, Row},
};
use serde_json::json;
use uuid::Uuid;

use crate::{COOLDOWN_TURNS, ORGS};

/// A passive session: the cooldown token to send back and, per memory, the turn it was last served.
#[derive(Default)]
struct Session {
    cooldown: Option<String>,
    last_served: HashMap<Uuid, usize>,
}

/// The demo agents of both organisations reading through the API while the lifecycle runs: each answer holds only
/// memories the oracle says the asker may read, and passive injection repeats no memory within a session's
/// cooldown.
pub struct Readers {
    client: hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    base: String,
    /// The local tokens' signing secret.
    secret: String,
    session: String,
    /// Per (organisation, agent): its passive session.
    sessions: HashMap<(Uuid, Uuid), Session>,
    pub reads: usize,
    pub served: usize,
    pub violations: Vec<String>,
}

impl Readers {
    pub fn new(api: &str, run: &str) -> anyhow::Result<Self> {
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
        let base = if api.starts_with("http") { api.to_string() } else { format!("http://{api}") };
        let session = format!("soak-{run}-{}", Uuid::now_v7());
        let secret = memory_core::config::required("MEMORY_JWT_SECRET")?;
        Ok(Self {
            client,
            base,
            secret,
            session,
            sessions: HashMap::new(),
            reads: 0,
            served: 0,
            violations: Vec::new(),
        })
    }

    /// Each organisation's coder (every read scope) and reviewer (org only), in passive mode and as a query.
    pub async fn read(&mut self, turn: usize) -> anyhow::Result<()> {
        for (o, organization_id) in ORGS.into_iter().enumerate() {
            for (agent, all_scopes) in [(demo::CODER[o], true), (demo::REVIEWER[o], false)] {
                for passive in [true, false] {
                    let asker = Principal {
                        organization_id,
                        agent_id: Some(agent),
                        project_scope: all_scopes,
                        task_scope: all_scopes,
                        agent_private_scope: all_scopes,
                        project_id: Some(demo::PROJECT[o]),
                        task_id: Some(demo::TASK[o]),
                        gated: passive,
                    };
                    self.read_as(&asker, turn, passive).await?;
                }
            }
        }
        Ok(())
    }

    async fn read_as(&mut self, asker: &Principal, turn: usize, passive: bool) -> anyhow::Result<()> {
        let (org, agent) = (asker.organization_id, asker.agent_id.expect("an agent"));
        let key = (org, agent);
        let mut body = json!({
            "query": format!("when does service-{} deploy", turn % 4), "max_results": 20,
            "project_id": asker.project_id, "task_id": asker.task_id,
        });
        if passive {
            body["mode"] = json!("passive");
            body["session_id"] = json!(format!("{}-{agent}", self.session));
            body["turn"] = json!(turn);
            if let Some(token) = self.sessions.get(&key).and_then(|s| s.cooldown.as_ref()) {
                body["cooldown_token"] = json!(token);
            }
        } else {
            body["mode"] = json!("agent_query");
        }
        let claims = retrieve::Claims::local(org, Some(agent), Duration::from_secs(600));
        let token = retrieve::auth::sign_local_token(&self.secret, &claims)?;
        let request = hyper::Request::post(format!("{}/v1/retrieve", self.base))
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {token}"))
            .body(Full::new(Bytes::from(body.to_string())))?;
        let response = self.client.request(request).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        self.reads += 1;
        if !status.is_success() {
            // A connection killed or a worker restarting may cost a read a 503; never a 4xx or a 500.
            if status.as_u16() != 503 {
                self.violations.push(format!("a read answered {status}: {}", String::from_utf8_lossy(&bytes)));
            }
            return Ok(());
        }
        let answer: serde_json::Value = serde_json::from_slice(&bytes)?;
        let session = self.sessions.entry(key).or_default();
        if passive {
            session.cooldown = answer["cooldown_token"].as_str().map(String::from);
        }
        let profiles = answer["entity_profiles"].as_array().into_iter().flatten().map(|p| (&p["profile"], false));
        let hits = answer["memories"].as_array().into_iter().flatten().map(|h| (&h["memory"], true));
        for (served, ranked) in hits.chain(profiles) {
            let memory: Memory = serde_json::from_value(served.clone()).context("a served memory")?;
            self.served += 1;
            if !oracle::may_read(asker, &Row::from(&memory)) {
                self.violations.push(format!("{agent} of {org} was served {}, which it may not read", memory.id));
            }
            if passive
                && ranked
                && let Some(last) = session.last_served.insert(memory.id, turn)
                && turn - last < COOLDOWN_TURNS
            {
                self.violations.push(format!("{} injected at turns {last} and {turn} of one session", memory.id));
            }
        }
        Ok(())
    }
}
