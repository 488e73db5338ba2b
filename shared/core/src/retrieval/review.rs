//! What waits on an operator: held decisions and undecided candidates ([`super::Retriever::review`]).

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::store::held::HeldDecision;

/// A candidate no check has decided this long after it was written is listed.
pub const UNDECIDED_AFTER: TimeDelta = TimeDelta::minutes(15);

/// The most undecided candidates listed.
pub const LISTED: usize = 100;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Review {
    /// Decisions a job held for review (the rules forbade them), oldest first.
    pub held: Vec<HeldDecision>,
    /// Candidates waiting for their checks, oldest first, at most [`LISTED`].
    pub undecided: Vec<Undecided>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Undecided {
    pub id: Uuid,
    /// Since when it waits.
    pub since: DateTime<Utc>,
}
