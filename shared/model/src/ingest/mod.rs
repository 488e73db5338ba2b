//! What producers send: the ingest message ([`IngestBatch`], [`IngestMessage`]), and the write gate: its checks of
//! a batch ([`check`]) and its trust rules.

mod check;
mod gate;
mod message;

pub use check::{
    Checked, MAX_ANCHOR_BYTES, MAX_CLOCK_SKEW, MAX_CONTENT_BYTES, MAX_CONTEXT_BYTES, MAX_ITEMS, MAX_MEMORIES,
    MAX_NAME_BYTES, MAX_TTL_SECONDS, check, normalise,
};
pub use gate::{admitted_trust, forbids_type, max_confidence};
pub use message::{
    EntityRef, ForgetJobType, ForgetRequest, History, IngestBatch, IngestMemory, IngestMessage, IngestProvenance,
    VERSION,
};
