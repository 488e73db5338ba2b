//! What waits on an operator: held decisions and undecided candidates ([`super::Retriever::review`]).

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::store::held::HeldDecision;

/// A candidate no check has decided this long after its last change is listed.
pub const UNDECIDED_AFTER: TimeDelta = TimeDelta::minutes(15);

/// The most undecided candidates listed.
pub const LISTED: usize = 100;

/// What waits on an operator in one organisation.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Review {
    /// Decisions a job held for review (the rules forbade them), oldest first.
    pub held: Vec<HeldDecision>,
    /// Candidates waiting for their checks, oldest first, at most [`LISTED`].
    pub undecided: Vec<Undecided>,
}

/// A candidate waiting for its checks.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Undecided {
    pub id: Uuid,
    /// Its last change, since which it waits.
    pub since: DateTime<Utc>,
}
