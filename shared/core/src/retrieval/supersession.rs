//! Supersession chains: which memory replaced which.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::{
    domain::Memory,
    store::{self, ReadFilter},
};

/// Hops followed before a chain is declared broken (a cycle or runaway chain).
pub const MAX_HOPS: usize = 10;

/// Follows `superseded_by` from `id` to the memory that is not superseded; more than [`MAX_HOPS`] links is an error.
pub async fn resolve(conn: &mut PgConnection, organization_id: Uuid, id: Uuid) -> crate::Result<Memory> {
    let mut current =
        store::memories::get(&mut *conn, organization_id, id).await?.ok_or(crate::Error::not_found("memory", id))?;
    for _ in 0..MAX_HOPS {
        let Some(next) = current.superseded_by else { return Ok(current) };
        current = store::memories::get(&mut *conn, organization_id, next)
            .await?
            .ok_or(crate::Error::not_found("memory", next))?;
    }
    match current.superseded_by {
        None => Ok(current),
        Some(_) => Err(crate::Error::Unexpected(anyhow::anyhow!(
            "supersession chain from {id} is longer than {MAX_HOPS} hops"
        ))),
    }
}

/// The chain through `id`, oldest first: the memories it (transitively) replaced, itself, and its successors,
/// each readable under `scope`, at most [`MAX_HOPS`] in each direction.
pub async fn chain(conn: &mut PgConnection, scope: &ReadFilter, id: Uuid) -> crate::Result<Vec<Memory>> {
    let start =
        store::memories::get_readable(&mut *conn, scope, id).await?.ok_or(crate::Error::not_found("memory", id))?;
    let mut before = Vec::new();
    let mut frontier = vec![start.id];
    for _ in 0..MAX_HOPS {
        let predecessors = store::memories::superseded_by_any(&mut *conn, scope, &frontier).await?;
        if predecessors.is_empty() {
            break;
        }
        frontier = predecessors.iter().map(|m| m.id).collect();
        before.extend(predecessors);
    }
    before.reverse();
    let mut after = Vec::new();
    let mut current = start.superseded_by;
    while let Some(next) = current {
        if after.len() >= MAX_HOPS {
            break;
        }
        let Some(memory) = store::memories::get_readable(&mut *conn, scope, next).await? else { break };
        current = memory.superseded_by;
        after.push(memory);
    }
    Ok(before.into_iter().chain(std::iter::once(start)).chain(after).collect())
}
