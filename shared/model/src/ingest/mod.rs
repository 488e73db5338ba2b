//! What producers send: the ingest message ([`IngestBatch`], [`IngestMessage`]) and the write gate's trust rules.

mod gate;
mod message;

pub use gate::{admitted_trust, forbids_type, max_confidence};
pub use message::{
    EntityRef, ForgetJobType, ForgetRequest, History, IngestBatch, IngestMemory, IngestMessage, IngestProvenance,
    VERSION,
};
