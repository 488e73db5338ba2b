//! The EventBridge side of the outbox relay: every outbox row becomes one event on the domain bus, with source
//! `agent-memory`, the event type as its detail type, and a detail carrying the outbox id for deduplication.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use aws_sdk_eventbridge::{Client, config::timeout::TimeoutConfig, primitives::DateTime, types::PutEventsRequestEntry};
use memory_core::{
    config,
    db::PgPool,
    lifecycle::outbox::{EventSink, OutboxRelay},
    store::outbox::OutboxEvent,
};

/// The `source` of every event this service publishes.
pub const SOURCE: &str = "agent-memory";

pub struct EventBridgeSink {
    client: Client,
    bus: String,
}

impl EventBridgeSink {
    pub fn new(client: Client, bus: impl Into<String>) -> Self {
        Self { client, bus: bus.into() }
    }

    /// The sink for the bus named by `MEMORY_EVENT_BUS`, with the SDK's default credentials and region; calls
    /// give up after five seconds, so a flush never holds its claimed rows for long.
    pub async fn from_env() -> anyhow::Result<Self> {
        let bus = config::required("MEMORY_EVENT_BUS")?;
        let timeouts = TimeoutConfig::builder().operation_timeout(Duration::from_secs(5)).build();
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest()).timeout_config(timeouts).load().await;
        Ok(Self::new(Client::new(&sdk), bus))
    }

    fn entry(&self, event: &OutboxEvent) -> PutEventsRequestEntry {
        let detail = serde_json::json!({
            "outbox_id": event.id,
            "organization_id": event.organization_id,
            "event_type": event.event_type,
            "occurred_at": event.created_at,
            "data": event.payload,
        });
        PutEventsRequestEntry::builder()
            .event_bus_name(&self.bus)
            .source(SOURCE)
            .detail_type(&event.event_type)
            .detail(detail.to_string())
            .time(DateTime::from_millis(event.created_at.timestamp_millis()))
            .build()
    }
}

#[async_trait]
impl EventSink for EventBridgeSink {
    async fn publish(&self, events: &[OutboxEvent]) -> anyhow::Result<Vec<bool>> {
        let entries: Vec<PutEventsRequestEntry> = events.iter().map(|e| self.entry(e)).collect();
        let output = self.client.put_events().set_entries(Some(entries)).send().await?;
        Ok(output.entries().iter().map(|e| e.error_code().is_none() && e.event_id().is_some()).collect())
    }
}

/// The relay over `pool` publishing to the configured bus.
pub async fn relay_from_env(pool: PgPool) -> anyhow::Result<OutboxRelay> {
    Ok(OutboxRelay::new(pool, Arc::new(EventBridgeSink::from_env().await?)))
}
