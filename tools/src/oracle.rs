//! What the lifecycle must never do, decided apart from the code that does it: a separately written model of who
//! may read a memory and which memory may replace, absorb, lower or feed which. It shares nothing with
//! `memory_core::domain::readership` or `lifecycle` but the row type it reads.
//!
//! Readers come straight from the spec's Stage 1 scope filter: a principal of the organisation reads `org`
//! memories; with the `project` read scope, the `project` memories of the project it asks for; with `task`, the
//! `task` memories of its task; with `agent_private`, the memories whose agent is itself, whatever their scope; with
//! the sensitivity gate on (passive injection), no `restricted` memory. "Every reader of B reads A" is decided by
//! asking every principal that could tell them apart (each agent, project and task the two name, one that they do
//! not, none; every set of read scopes; the gate on and off), not by comparing the two rows' fields.
//!
//! The rules (ARCHITECTURE.md's invariants; trust verified > unverified > untrusted):
//! - a memory superseded by a duplicate or a contradiction: its replacement is read by every reader of it, is
//!   trusted at least as much, and, for a contradiction, claimed a confidence above 0.85;
//! - a merge: read by exactly the readers of each source, as trusted as the least trusted source;
//! - an entity profile: read only by readers of every source, trusted no more than any;
//! - a confidence lowered because of another memory: that memory is read by every reader of the lowered one and is
//!   trusted at least as much;
//! - nothing names a memory of another organisation.

use std::collections::HashMap;

use memory_core::domain::{Memory, Scope, Sensitivity, TrustLevel};
use uuid::Uuid;

/// What the model reads of a memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub id: Uuid,
    pub organization_id: Uuid,
    pub scope: Scope,
    pub project_id: Option<Uuid>,
    pub task_id: Option<Uuid>,
    pub agent_id: Option<Uuid>,
    pub restricted: bool,
    /// 0 untrusted, 1 unverified, 2 verified.
    pub trust: u8,
    pub confidence: f64,
}

impl From<&Memory> for Row {
    fn from(m: &Memory) -> Self {
        Self {
            id: m.id,
            organization_id: m.organization_id,
            scope: m.scope,
            project_id: m.project_id,
            task_id: m.project_task_id,
            agent_id: m.agent_id,
            restricted: m.sensitivity == Sensitivity::Restricted,
            trust: match m.provenance.trust_level {
                TrustLevel::Untrusted => 0,
                TrustLevel::Unverified => 1,
                TrustLevel::Verified => 2,
            },
            confidence: m.confidence,
        }
    }
}

/// Who asks: an organisation's agent (or a service, without one), its read scopes beyond `org`, the project and
/// task it asks for, and whether the sensitivity gate is on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Principal {
    pub organization_id: Uuid,
    pub agent_id: Option<Uuid>,
    pub project_scope: bool,
    pub task_scope: bool,
    pub agent_private_scope: bool,
    pub project_id: Option<Uuid>,
    pub task_id: Option<Uuid>,
    pub gated: bool,
}

/// The spec's Stage 1 filter, for one principal and one memory.
pub fn may_read(p: &Principal, m: &Row) -> bool {
    if m.organization_id != p.organization_id || (p.gated && m.restricted) {
        return false;
    }
    let by_scope = match m.scope {
        Scope::Org => true,
        Scope::Project => p.project_scope && p.project_id.is_some() && m.project_id == p.project_id,
        Scope::Task => p.task_scope && p.task_id.is_some() && m.task_id == p.task_id,
        Scope::AgentPrivate => false,
    };
    by_scope || (p.agent_private_scope && p.agent_id.is_some() && m.agent_id == p.agent_id)
}

/// Every principal of the organisation that could read one of `rows` and not another.
fn principals(organization_id: Uuid, rows: &[&Row]) -> Vec<Principal> {
    let some_other = Some(Uuid::from_u128(u128::MAX));
    let named = |pick: fn(&Row) -> Option<Uuid>| {
        let mut ids: Vec<Option<Uuid>> = rows.iter().map(|r| pick(r)).filter(Option::is_some).collect();
        ids.extend([None, some_other]);
        ids.dedup();
        ids
    };
    let (agents, projects, tasks) = (named(|r| r.agent_id), named(|r| r.project_id), named(|r| r.task_id));
    let mut all = Vec::new();
    for &agent_id in &agents {
        for &project_id in &projects {
            for &task_id in &tasks {
                for scopes in 0..8u8 {
                    for gated in [false, true] {
                        all.push(Principal {
                            organization_id,
                            agent_id,
                            project_scope: scopes & 1 != 0,
                            task_scope: scopes & 2 != 0,
                            agent_private_scope: scopes & 4 != 0,
                            project_id,
                            task_id,
                            gated,
                        });
                    }
                }
            }
        }
    }
    all
}

/// Whether every principal who may read `b` may read `a`.
pub fn read_by_every_reader_of(a: &Row, b: &Row) -> bool {
    principals(b.organization_id, &[a, b]).iter().all(|p| !may_read(p, b) || may_read(p, a))
}

/// Why a supersession happened.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Replaced {
    Duplicate,
    /// `claimed`: the winner's confidence when it superseded (it may have been lowered since).
    Contradicted {
        claimed: f64,
    },
    /// The winner is a merge of the loser and others.
    Merged,
}

/// The outcome of the lifecycle's decisions, as the final tables and events record them.
#[derive(Debug, Default)]
pub struct World {
    pub memories: HashMap<Uuid, Row>,
    /// (loser, winner, why).
    pub supersessions: Vec<(Uuid, Uuid, Replaced)>,
    /// (profile, its sources).
    pub profiles: Vec<(Uuid, Vec<Uuid>)>,
    /// (lowered, the memory it was lowered because of).
    pub lowerings: Vec<(Uuid, Uuid)>,
}

/// A confidence above which a new memory's contradiction supersedes (the spec's 0.85).
const SUPERSEDING_CONFIDENCE: f64 = 0.85;

/// Every rule `world` breaks, each named with its memories.
pub fn violations(world: &World) -> Vec<String> {
    let mut found = Vec::new();
    let row = |id: &Uuid, found: &mut Vec<String>| {
        let row = world.memories.get(id);
        if row.is_none() {
            found.push(format!("memory {id} is named but not in the organisation"));
        }
        row
    };
    let mut merges: HashMap<Uuid, Vec<&Row>> = HashMap::new();
    for (loser, winner, why) in &world.supersessions {
        let (Some(l), Some(w)) = (row(loser, &mut found), row(winner, &mut found)) else { continue };
        if l.organization_id != w.organization_id {
            found.push(format!("{winner} replaced {loser} of another organisation"));
            continue;
        }
        match why {
            Replaced::Merged => {
                if !(read_by_every_reader_of(w, l) && read_by_every_reader_of(l, w)) {
                    found.push(format!("merge {winner} has other readers than its source {loser}"));
                }
                merges.entry(*winner).or_default().push(l);
            }
            Replaced::Duplicate | Replaced::Contradicted { .. } => {
                if !read_by_every_reader_of(w, l) {
                    found.push(format!("{winner} replaced {loser}, which some of its readers cannot read"));
                }
                if w.trust < l.trust {
                    found.push(format!("{winner} replaced {loser}, which is trusted more"));
                }
                if let Replaced::Contradicted { claimed } = why
                    && *claimed <= SUPERSEDING_CONFIDENCE
                {
                    found.push(format!("{winner} superseded {loser} by contradiction at confidence {claimed}"));
                }
            }
        }
    }
    for (merge, sources) in &merges {
        let least = sources.iter().map(|s| s.trust).min().unwrap_or_default();
        if world.memories[merge].trust != least {
            found.push(format!("merge {merge} is not as trusted as its least trusted source"));
        }
    }
    for (profile, sources) in &world.profiles {
        let Some(p) = row(profile, &mut found) else { continue };
        if sources.is_empty() {
            found.push(format!("profile {profile} names no sources"));
        }
        for source in sources {
            let Some(s) = row(source, &mut found) else { continue };
            if s.organization_id != p.organization_id || !read_by_every_reader_of(s, p) {
                found.push(format!("profile {profile} has readers its source {source} has not"));
            }
            if p.trust > s.trust {
                found.push(format!("profile {profile} is trusted more than its source {source}"));
            }
        }
    }
    for (lowered, by) in &world.lowerings {
        let (Some(l), Some(b)) = (row(lowered, &mut found), row(by, &mut found)) else { continue };
        if l.organization_id != b.organization_id || !read_by_every_reader_of(b, l) {
            found.push(format!("{by} lowered {lowered}, which some of its readers cannot read"));
        }
        if b.trust < l.trust {
            found.push(format!("{by} lowered {lowered}, which is trusted more"));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORG: Uuid = Uuid::from_u128(1);

    fn row(n: u128, scope: Scope) -> Row {
        Row {
            id: Uuid::from_u128(100 + n),
            organization_id: ORG,
            scope,
            project_id: None,
            task_id: None,
            agent_id: None,
            restricted: false,
            trust: 1,
            confidence: 0.7,
        }
    }

    fn world(rows: &[&Row]) -> World {
        World { memories: rows.iter().map(|r| (r.id, (*r).clone())).collect(), ..World::default() }
    }

    /// An org memory, its project, task and agent-private kin, and restricted and more trusted twins.
    struct Kin {
        org: Row,
        project: Row,
        other_project: Row,
        task: Row,
        private: Row,
        restricted: Row,
        verified: Row,
    }

    fn kin() -> Kin {
        let (p, q, t, a) =
            (Some(Uuid::from_u128(7)), Some(Uuid::from_u128(8)), Some(Uuid::from_u128(9)), Some(Uuid::from_u128(10)));
        Kin {
            org: row(1, Scope::Org),
            project: Row { project_id: p, ..row(2, Scope::Project) },
            other_project: Row { project_id: q, ..row(3, Scope::Project) },
            task: Row { project_id: p, task_id: t, ..row(4, Scope::Task) },
            private: Row { agent_id: a, ..row(5, Scope::AgentPrivate) },
            restricted: Row { restricted: true, trust: 2, confidence: 0.95, ..row(6, Scope::Org) },
            verified: Row { trust: 2, confidence: 0.95, ..row(7, Scope::Org) },
        }
    }

    #[test]
    fn readers_follow_the_scope_filter() {
        let k = kin();
        for narrow in [&k.project, &k.task, &k.private, &k.restricted] {
            assert!(read_by_every_reader_of(&k.org, narrow), "org is read by every reader of {:?}", narrow.scope);
            assert!(!read_by_every_reader_of(narrow, &k.org), "{:?} is not read by every org reader", narrow.scope);
        }
        assert!(!read_by_every_reader_of(&k.project, &k.other_project));
        assert!(!read_by_every_reader_of(&k.project, &k.task));
        // An agent's project memory is read by the project and by the agent; its private one only by the agent.
        let authored = Row { agent_id: k.private.agent_id, ..k.project.clone() };
        assert!(read_by_every_reader_of(&authored, &k.private));
        assert!(!read_by_every_reader_of(&k.private, &authored));
        let elsewhere = Row { organization_id: Uuid::from_u128(2), ..k.org.clone() };
        assert!(!read_by_every_reader_of(&elsewhere, &k.private));
    }

    #[test]
    fn a_world_that_keeps_the_rules_has_no_violation() {
        let k = kin();
        let merge = Row { id: Uuid::from_u128(999), ..k.org.clone() };
        let twin = Row { id: Uuid::from_u128(998), ..k.org.clone() };
        let lowered = Row { confidence: 0.6, ..k.verified.clone() };
        let mut w = world(&[&k.org, &k.project, &k.private, &lowered, &merge, &twin]);
        w.supersessions = vec![
            (k.project.id, k.org.id, Replaced::Duplicate),
            // The winner claimed 0.95 when it superseded; its confidence is lower now (a later contradiction).
            (k.org.id, k.verified.id, Replaced::Contradicted { claimed: 0.95 }),
            (twin.id, merge.id, Replaced::Merged),
        ];
        w.profiles = vec![(k.private.id, vec![k.org.id, k.private.id])];
        w.lowerings = vec![(k.private.id, k.org.id)];
        assert_eq!(violations(&w), Vec::<String>::new());
    }

    /// Each rule, broken once in a forged final table: the oracle must report it.
    #[test]
    fn every_forged_violation_is_reported() {
        let k = kin();
        let all = [&k.org, &k.project, &k.other_project, &k.task, &k.private, &k.restricted, &k.verified];
        let untrusted = Row { trust: 0, ..row(20, Scope::Org) };
        let foreign = Row { organization_id: Uuid::from_u128(2), ..row(21, Scope::Org) };
        let merge_of = |n: u128, base: &Row| Row { id: Uuid::from_u128(500 + n), ..base.clone() };
        // (the case, what its report must say, the forged world)
        let cases: Vec<(&str, &str, World)> = vec![
            ("a duplicate narrower than what it replaced", "which some of its readers cannot read", {
                let mut w = world(&all);
                w.supersessions.push((k.org.id, k.project.id, Replaced::Duplicate));
                w
            }),
            ("a project memory replacing another project's", "which some of its readers cannot read", {
                let mut w = world(&all);
                w.supersessions.push((k.other_project.id, k.project.id, Replaced::Duplicate));
                w
            }),
            ("a restricted memory replacing a normal one", "which some of its readers cannot read", {
                let mut w = world(&all);
                w.supersessions.push((k.org.id, k.restricted.id, Replaced::Contradicted { claimed: 0.95 }));
                w
            }),
            ("a less trusted memory replacing a more trusted one", "which is trusted more", {
                let mut w = world(&[&k.org, &untrusted]);
                w.supersessions.push((k.org.id, untrusted.id, Replaced::Duplicate));
                w
            }),
            ("a contradiction superseding below the confidence", "by contradiction at confidence", {
                let mut w = world(&all);
                w.supersessions.push((k.project.id, k.org.id, Replaced::Contradicted { claimed: 0.85 }));
                w
            }),
            ("a merge wider than a source", "has other readers than its source", {
                let merge = merge_of(1, &k.org);
                let mut w = world(&[&k.project, &merge]);
                w.supersessions.push((k.project.id, merge.id, Replaced::Merged));
                w
            }),
            ("a merge narrower than a source", "has other readers than its source", {
                let merge = merge_of(2, &k.project);
                let mut w = world(&[&k.org, &merge]);
                w.supersessions.push((k.org.id, merge.id, Replaced::Merged));
                w
            }),
            ("a merge trusted more than its least trusted source", "least trusted source", {
                let merge = merge_of(3, &k.org);
                let mut w = world(&[&k.org, &untrusted, &merge]);
                w.supersessions.push((k.org.id, merge.id, Replaced::Merged));
                w.supersessions.push((untrusted.id, merge.id, Replaced::Merged));
                w
            }),
            ("a profile read by someone who cannot read a source", "has readers its source", {
                let mut w = world(&all);
                w.profiles.push((k.org.id, vec![k.org.id, k.private.id]));
                w
            }),
            ("a profile trusted more than a source", "is trusted more than its source", {
                let mut w = world(&[&k.verified, &k.org]);
                w.profiles.push((k.verified.id, vec![k.org.id]));
                w
            }),
            ("a profile without sources", "names no sources", {
                let mut w = world(&all);
                w.profiles.push((k.org.id, vec![]));
                w
            }),
            ("a lowering by a memory some readers cannot read", "which some of its readers cannot read", {
                let mut w = world(&all);
                w.lowerings.push((k.org.id, k.private.id));
                w
            }),
            ("a lowering by a less trusted memory", "which is trusted more", {
                let mut w = world(&[&k.verified, &k.org]);
                w.lowerings.push((k.verified.id, k.org.id));
                w
            }),
            ("a supersession across organisations", "of another organisation", {
                let mut w = world(&[&k.org, &foreign]);
                w.supersessions.push((k.org.id, foreign.id, Replaced::Duplicate));
                w
            }),
            ("a memory named that the organisation does not hold", "is named but not in the organisation", {
                let mut w = world(&[&k.org]);
                w.lowerings.push((k.org.id, Uuid::from_u128(4242)));
                w
            }),
        ];
        for (case, says, w) in cases {
            let found = violations(&w);
            assert!(found.iter().any(|v| v.contains(says)), "{case}: not reported as {says:?}, but {found:?}");
        }
    }
}
