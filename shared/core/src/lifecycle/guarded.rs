//! The lifecycle decisions between two memories, each applying the readership and trust rules
//! ([`crate::domain::readership`]) before it changes anything: a change the rules allow is made through
//! [`crate::store::transitions`]; a forbidden one is held in `memory_held_decision` for a person, with the reason.
//! Dedup, contradiction, synthesis, the file scan and a curated import replace one memory by another only through
//! these, so none can forget a rule. A transition of one memory alone (promotion, expiry, archiving a profile whose
//! sources are gone or a chunk whose file is) decides nothing about another and goes to the store directly.

use sqlx::PgConnection;

use crate::{
    domain::{
        Memory, NewMemory,
        readership::{forbids_lowering, forbids_merging, forbids_replacing, forbids_succeeding},
    },
    store::{self, transitions},
};

/// Which job decided (recorded with a held decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decider {
    Dedup,
    Contradiction,
    /// A curated import restoring an export's history.
    Import,
    Synthesis,
    FileScan,
}

impl Decider {
    fn as_str(self) -> &'static str {
        match self {
            Self::Dedup => "dedup",
            Self::Contradiction => "contradiction",
            Self::Import => "import",
            Self::Synthesis => "synthesis",
            Self::FileScan => "file_scan",
        }
    }
}

/// What a guarded change did.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome<T = ()> {
    /// The change was made.
    Applied(T),
    /// The rules forbid it: it was held for review, for this reason.
    Held(String),
}

/// `winner` supersedes `loser` (both locked by the caller) when its readers reach every reader of `loser` and its
/// trust allows it.
pub async fn supersede(
    tx: &mut PgConnection,
    decider: Decider,
    winner: &Memory,
    loser: &Memory,
    cause: &str,
) -> crate::Result<Outcome> {
    if let Some(why) = forbids_replacing(winner, loser) {
        return hold(tx, decider, "supersede", loser, winner, why).await;
    }
    transitions::supersede(&mut *tx, winner.organization_id, loser.id, winner.id, cause).await?;
    Ok(Outcome::Applied(()))
}

/// `next`, a new version of `previous` (locked by the caller), is created from `derived_from` and supersedes it, when
/// it has exactly `previous`'s readers ([`forbids_succeeding`]); otherwise nothing is created and the change is held.
pub async fn succeed(
    tx: &mut PgConnection,
    decider: Decider,
    next: &NewMemory,
    derived_from: &[uuid::Uuid],
    previous: &Memory,
    cause: &str,
) -> crate::Result<Outcome<Memory>> {
    if let Some(why) = forbids_succeeding(next, previous) {
        return hold(tx, decider, "succeed", previous, previous, why).await;
    }
    let created = transitions::create(&mut *tx, next, derived_from).await?;
    transitions::supersede(&mut *tx, previous.organization_id, previous.id, created.id, cause).await?;
    Ok(Outcome::Applied(created))
}

/// `merged`, written from `a` and `b` (both locked by the caller), replaces them: it is created with their tags
/// and mentions, supersedes both, and the merge is recorded; only when `a` and `b` have the same readers and the
/// merged trust replaces neither wrongly.
pub async fn merge(
    tx: &mut PgConnection,
    decider: Decider,
    merged: &NewMemory,
    a: &Memory,
    b: &Memory,
) -> crate::Result<Outcome<Memory>> {
    if let Some(why) = forbids_merging(a, b) {
        return hold(tx, decider, "merge", a, b, why).await;
    }
    let org = a.organization_id;
    let created = transitions::create(&mut *tx, merged, &[a.id, b.id]).await?;
    transitions::supersede(&mut *tx, org, a.id, created.id, "dedup_merge").await?;
    transitions::supersede(&mut *tx, org, b.id, created.id, "dedup_merge").await?;
    transitions::record_merge(&mut *tx, org, created.id, &[a.id, b.id]).await?;
    // The sources' other deferred pairs can no longer be reviewed (a source is superseded): the merged memory
    // takes them over.
    if store::dedup::carry_deferred(&mut *tx, org, &[a.id, b.id], created.id).await? > 0 {
        crate::due::queue_review_if_due(&mut *tx, org, Some(created.id)).await?;
    }
    Ok(Outcome::Applied(created))
}

/// `actor` (locked) lowers `target`'s (locked) confidence by `penalty`, archiving it when none is left, when its
/// readers reach every reader of `target` and an untrusted memory is not lowering a verified one.
pub async fn lower_confidence(
    tx: &mut PgConnection,
    decider: Decider,
    actor: &Memory,
    target: &Memory,
    penalty: f64,
    cause: &str,
) -> crate::Result<Outcome> {
    if let Some(why) = forbids_lowering(actor, target) {
        return hold(tx, decider, "lower_confidence", target, actor, why).await;
    }
    let (org, lowered) = (target.organization_id, (target.confidence - penalty).max(0.0));
    transitions::change_confidence(&mut *tx, org, target.id, target.confidence, lowered, cause, &[actor.id]).await?;
    if lowered < 1e-9 {
        transitions::archive(&mut *tx, org, target.id, cause).await?;
    }
    Ok(Outcome::Applied(()))
}

/// Holds `action` of `decider` on `memory` (because of `other`) for review.
async fn hold<T>(
    tx: &mut PgConnection,
    decider: Decider,
    action: &str,
    memory: &Memory,
    other: &Memory,
    why: String,
) -> crate::Result<Outcome<T>> {
    store::held::hold(&mut *tx, memory.organization_id, decider.as_str(), action, memory.id, other.id, &why).await?;
    Ok(Outcome::Held(why))
}
