//! Forgetting (`memory-admin forget`): the memories a selector matches, and every memory derived from them (the
//! merges that replaced them, the entity profiles of the entities they mention), become tombstones in bounded
//! passes of one transaction each, so a large selection is forgotten in steps and an interrupted run goes on
//! where it stopped; running it again changes nothing. Each forgotten memory writes `memory.forgotten` (its id
//! only).

use sqlx::PgPool;
use uuid::Uuid;

pub use crate::store::forget::ForgetSelector;
use crate::store::{self, outbox};

/// Memories one pass takes at most (with what was derived from them).
pub const PER_PASS: i64 = 100;

/// One pass: up to [`PER_PASS`] matching memories and their derived ones forgotten; returns how many (0: done).
pub async fn forget_pass(pool: &PgPool, organization_id: Uuid, selector: &ForgetSelector) -> crate::Result<usize> {
    let mut tx = store::begin_for_org(pool, organization_id).await?;
    let mut ids = store::forget::matching(&mut tx, organization_id, selector, PER_PASS).await?;
    let mut frontier = ids.clone();
    // What was made from what is forgotten, and from that, and so on.
    while !frontier.is_empty() {
        let derived: Vec<Uuid> = store::forget::derived_from(&mut tx, organization_id, &frontier)
            .await?
            .into_iter()
            .filter(|id| !ids.contains(id))
            .collect();
        ids.extend(&derived);
        frontier = derived;
    }
    store::forget::erase(&mut tx, organization_id, &ids).await?;
    for id in &ids {
        outbox::append(&mut *tx, organization_id, "memory.forgotten", serde_json::json!({ "memory_id": id })).await?;
    }
    tx.commit().await?;
    Ok(ids.len())
}

/// Passes until nothing the selector matches is left; returns how many memories were forgotten. Forgetting a
/// project or the organisation also deletes the list of files its imports left out.
pub async fn forget(pool: &PgPool, organization_id: Uuid, selector: &ForgetSelector) -> crate::Result<usize> {
    let mut total = 0;
    loop {
        let forgotten = forget_pass(pool, organization_id, selector).await?;
        if forgotten == 0 {
            break;
        }
        total += forgotten;
    }
    let project = match selector {
        ForgetSelector::Project(project) => Some(Some(*project)),
        ForgetSelector::Organization => Some(None),
        _ => None,
    };
    if let Some(project) = project {
        let mut tx = store::begin_for_org(pool, organization_id).await?;
        store::skipped::forget(&mut *tx, organization_id, project).await?;
        tx.commit().await?;
    }
    Ok(total)
}
