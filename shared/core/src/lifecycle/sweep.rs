//! The lifecycle's backstop, run on a schedule (`{"task": "lifecycle_sweep"}`): what the message flow can leave
//! undone is done here. Deferred dedup pairs whose memories are both active get a review queued (promotion and
//! merges queue theirs as they happen), and a candidate that the contradiction check has not decided within the
//! bound (its check failed until it dead-lettered, say) is decided by rule: promoted unchecked, with the reason held
//! for a person in `memory_held_decision`, unless its confidence is below the promotion confidence. Each visited
//! organisation's keyword lists that are due are packed again ([`store::keyword::pack`]: a posting of the list was
//! deleted, or its tail reached a sixteenth of it).
//! [`prune`] (`{"task": "prune"}`, daily) deletes what no longer serves: published events and sent jobs after a
//! week, batch records after the queues' retention, and dedup pairs that can never be reviewed again.

use chrono::TimeDelta;
use sqlx::PgPool;
use uuid::Uuid;

use crate::store::{self, transitions, turns::Sweep};

/// How long a candidate may wait for its contradiction check (`MEMORY_CANDIDATE_BOUND_MINUTES`): longer than SQS
/// retries a failing check (five receives, each after a visibility timeout) before moving it to the DLQ.
pub const DEFAULT_CANDIDATE_BOUND: TimeDelta = TimeDelta::hours(2);
/// Candidates one run decides per organisation at most (the next run takes the rest).
const CANDIDATES_PER_RUN: i64 = 100;

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub reviews_queued: usize,
    pub promoted_unchecked: usize,
    /// Memories whose time to live had passed, archived (retrieval stopped returning them when it passed).
    pub archived_expired: usize,
    /// Keyword lists packed again with the postings written or deleted since.
    pub lexemes_packed: u64,
}

/// Expired memories one run archives per organisation at most (the next run takes the rest).
const EXPIRED_PER_RUN: i64 = 500;

/// One pass over the next `organizations` organisations, least recently swept first (every organisation is visited
/// within a bounded number of runs however many there are).
pub async fn run(pool: &PgPool, candidate_bound: TimeDelta, organizations: i64) -> crate::Result<SweepReport> {
    let mut report = SweepReport::default();
    for organization_id in store::turns::next_to_sweep(pool, Sweep::Lifecycle, organizations).await? {
        let mut tx = store::begin_for_org(pool, organization_id).await?;
        // Promotion first: the promoted memories' pairs are then reviewable now.
        report.promoted_unchecked += promote_undecided(&mut tx, organization_id, candidate_bound).await?;
        report.reviews_queued += usize::from(crate::due::queue_review_if_due(&mut tx, organization_id, None).await?);
        for id in store::memories::expired(&mut *tx, organization_id, EXPIRED_PER_RUN).await? {
            transitions::archive(&mut tx, organization_id, id, "expired").await?;
            report.archived_expired += 1;
        }
        tx.commit().await?;
        report.lexemes_packed += pack_postings(pool, organization_id).await;
    }
    Ok(report)
}

/// How long one run packs an organisation's keyword postings at most (the next run goes on).
const PACKING_BUDGET: std::time::Duration = std::time::Duration::from_secs(2);

/// Packs the organisation's keyword lists that are due ([`store::keyword::pack`]), statement by statement, within
/// [`PACKING_BUDGET`]; returns how many lexemes it packed. Packing only saves retrieval work, so a failure is logged
/// and the sweep goes on.
async fn pack_postings(pool: &PgPool, organization_id: Uuid) -> u64 {
    let started = std::time::Instant::now();
    let mut packed = 0;
    while started.elapsed() < PACKING_BUDGET {
        match store::keyword::pack(pool, organization_id, store::keyword::PACK_POSTINGS).await {
            Ok(0) => break,
            Ok(lexemes) => packed += lexemes,
            Err(error) => {
                tracing::warn!(%organization_id, %error, "packing keyword postings failed; the next sweep retries");
                break;
            }
        }
    }
    packed
}

/// Decides the candidates that waited longer than `bound` for their contradiction check, by rule: promoted unchecked
/// (the reason held for a person) when their confidence reaches the promotion confidence, kept a candidate (and
/// marked checked) otherwise, as a check would.
async fn promote_undecided(
    tx: &mut sqlx::PgConnection,
    organization_id: Uuid,
    bound: TimeDelta,
) -> crate::Result<usize> {
    let waiting = store::memories::undecided_candidates(&mut *tx, organization_id, bound, CANDIDATES_PER_RUN).await?;
    if waiting.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = waiting.iter().map(|(id, _)| *id).collect();
    let locked = transitions::lock(&mut *tx, organization_id, &ids).await?;
    // Read again under the locks: a check that finished meanwhile has decided its memory.
    let still = store::memories::undecided_candidates(&mut *tx, organization_id, bound, CANDIDATES_PER_RUN).await?;
    let reason = format!(
        "the contradiction check did not decide this memory within {} minutes; promoted unchecked",
        bound.num_minutes()
    );
    let mut promoted = Vec::new();
    for (id, _) in still.into_iter().filter(|(id, _)| ids.contains(id)) {
        store::memories::mark_checked(&mut *tx, organization_id, id).await?;
        let confident = locked.iter().any(|m| m.id == id && m.confidence >= crate::domain::PROMOTION_CONFIDENCE);
        if !confident {
            continue;
        }
        transitions::promote(&mut *tx, organization_id, id).await?;
        promoted.push(id);
        store::held::hold_unchecked_promotion(&mut *tx, organization_id, id, &reason).await?;
    }
    crate::due::queue_due_syntheses(&mut *tx, organization_id, &promoted).await?;
    Ok(promoted.len())
}

/// How long published events and sent jobs are kept.
pub const OUTBOX_RETENTION: TimeDelta = TimeDelta::days(7);
/// How long a batch record is kept: longer than SQS keeps a message (14 days at most), so any redelivery finds it.
pub const BATCH_RETENTION: TimeDelta = TimeDelta::days(15);
/// How long a settled dedup pair is kept after its decision.
pub const PAIR_RETENTION: TimeDelta = TimeDelta::days(1);

/// What one prune did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneReport {
    pub events: u64,
    pub jobs: u64,
    pub batches: u64,
    pub pairs: u64,
}

/// Deletes, in the next `organizations` organisations (least recently pruned first), what is kept no longer: events
/// published and jobs sent more than [`OUTBOX_RETENTION`] ago, batch records older than [`BATCH_RETENTION`], and
/// dedup pairs one of whose memories is no longer current, settled more than [`PAIR_RETENTION`] ago.
pub async fn prune(pool: &PgPool, organizations: i64) -> crate::Result<PruneReport> {
    let now = chrono::Utc::now();
    let mut report = PruneReport::default();
    for organization_id in store::turns::next_to_sweep(pool, Sweep::Prune, organizations).await? {
        let mut tx = store::begin_for_org(pool, organization_id).await?;
        report.events += store::outbox::prune_published(&mut *tx, organization_id, now - OUTBOX_RETENTION).await?;
        report.jobs += store::jobs::prune_sent(&mut *tx, organization_id, now - OUTBOX_RETENTION).await?;
        report.batches += store::ingest::prune_batches(&mut *tx, organization_id, now - BATCH_RETENTION).await?;
        report.pairs += store::dedup::prune_settled(&mut *tx, organization_id, now - PAIR_RETENTION).await?;
        tx.commit().await?;
    }
    Ok(report)
}
