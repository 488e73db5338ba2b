//! Who can read a memory, and the two rules every lifecycle job obeys:
//! - content derived from a set of memories is readable only by callers who could read every one of them;
//! - a memory may supersede, merge into, or lower the confidence of only a memory whose readers it reaches at least
//!   as widely, and only if the trust of its provenance allows it.
//!
//! Readers follow the Stage 1 scope filter: every principal of the organisation reads `org` memories (read scopes
//! are a hierarchy rooted at `org`); `project` and `task` memories are read by principals with that scope asking
//! for that project or task; an agent reads the memories whose `agent_id` is its own whatever their scope; a
//! `restricted` memory is withheld wherever the sensitivity gate is on.

use std::fmt;

use uuid::Uuid;

use super::{Memory, NewMemory, Scope, Sensitivity, TrustLevel};

/// The part of a memory that decides who reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Readership {
    pub scope: Scope,
    /// The project of a `project` memory, the task of a `task` memory; None otherwise.
    pub owner: Option<Uuid>,
    /// The agent that reads it whatever its scope (the owner of an `agent_private` memory).
    pub agent_id: Option<Uuid>,
    pub sensitivity: Sensitivity,
}

impl Readership {
    pub fn of(memory: &Memory) -> Self {
        Self::new(memory.scope, memory.project_id, memory.project_task_id, memory.agent_id, memory.sensitivity)
    }

    /// The readership a memory about to be written will have.
    pub fn of_new(memory: &NewMemory) -> Self {
        Self::new(memory.scope, memory.project_id, memory.project_task_id, memory.agent_id, memory.sensitivity)
    }

    fn new(
        scope: Scope,
        project_id: Option<Uuid>,
        task_id: Option<Uuid>,
        agent_id: Option<Uuid>,
        sensitivity: Sensitivity,
    ) -> Self {
        let owner = match scope {
            Scope::Project => project_id,
            Scope::Task => task_id,
            Scope::Org | Scope::AgentPrivate => None,
        };
        // Everyone reads org memories, so the author of one adds no reader.
        let agent_id = if scope == Scope::Org { None } else { agent_id };
        Self { scope, owner, agent_id, sensitivity }
    }

    /// Whether every caller who can read a memory of `other` readership can read one of this readership.
    pub fn reaches(&self, other: &Self) -> bool {
        let sensitivity = self.sensitivity == Sensitivity::Normal || other.sensitivity == Sensitivity::Restricted;
        if !sensitivity {
            return false;
        }
        if self.scope == Scope::Org {
            return true;
        }
        let scope_readers = match other.scope {
            Scope::Org => false,
            Scope::Project | Scope::Task => self.scope == other.scope && self.owner == other.owner,
            Scope::AgentPrivate => true,
        };
        let agent_reader = other.agent_id.is_none() || self.agent_id == other.agent_id;
        scope_readers && agent_reader
    }

    /// Whether the two have exactly the same readers.
    pub fn same_readers(&self, other: &Self) -> bool {
        self.reaches(other) && other.reaches(self)
    }
}

/// A stable text key (stored with each entity profile to name its partition).
impl fmt::Display for Readership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = |v: Option<Uuid>| v.map(|u| u.to_string()).unwrap_or_else(|| "-".into());
        write!(f, "{}:{}:{}:{}", self.scope.as_str(), id(self.owner), id(self.agent_id), self.sensitivity.as_str())
    }
}

/// Trust order of provenance: verified > unverified > untrusted.
fn rank(trust: TrustLevel) -> u8 {
    match trust {
        TrustLevel::Untrusted => 0,
        TrustLevel::Unverified => 1,
        TrustLevel::Verified => 2,
    }
}

/// The highest confidence a memory of this trust level is stored with (a producer's claim, a merge's, a profile's).
pub fn max_confidence(trust: TrustLevel) -> f64 {
    match trust {
        TrustLevel::Verified => 1.0,
        TrustLevel::Unverified => 0.85,
        TrustLevel::Untrusted => 0.5,
    }
}

/// The trust of content derived from sources of these trust levels: the least trusted one's.
pub fn derived_trust(levels: impl IntoIterator<Item = TrustLevel>) -> TrustLevel {
    levels.into_iter().min_by_key(|t| rank(*t)).unwrap_or(TrustLevel::Unverified)
}

/// Why `winner` may not replace (supersede, or absorb in a merge) `loser`; None when it may.
pub fn forbids_replacing(winner: &Memory, loser: &Memory) -> Option<String> {
    if !Readership::of(winner).reaches(&Readership::of(loser)) {
        return Some(format!(
            "readership: {} does not reach every reader of {} ({} vs {})",
            winner.id,
            loser.id,
            Readership::of(winner),
            Readership::of(loser)
        ));
    }
    forbids_trust(winner.provenance.trust_level, loser.provenance.trust_level, "replace")
}

/// Why `next`, a new version of `previous` (a profile rewritten from its partition's current sources, a chunk re-read
/// from its changed file), may not replace it; None when it may. A version must have exactly its predecessor's
/// readers. Trust is not compared: a version is as trusted as what it was made from now, and holding it back would
/// keep serving the predecessor, made from sources that may since be gone.
pub fn forbids_succeeding(next: &NewMemory, previous: &Memory) -> Option<String> {
    let (new, old) = (Readership::of_new(next), Readership::of(previous));
    (!new.same_readers(&old))
        .then(|| format!("readership: a new version of {} needs its readers ({new} vs {old})", previous.id))
}

/// Why `actor` may not lower `target`'s confidence; None when it may.
pub fn forbids_lowering(actor: &Memory, target: &Memory) -> Option<String> {
    if !Readership::of(actor).reaches(&Readership::of(target)) {
        return Some(format!(
            "readership: {} does not reach every reader of {} ({} vs {})",
            actor.id,
            target.id,
            Readership::of(actor),
            Readership::of(target)
        ));
    }
    forbids_trust(actor.provenance.trust_level, target.provenance.trust_level, "lower")
}

/// Why `a` and `b` may not be merged into one memory; None when they may: a merge needs both to have the same
/// readers, and the merged memory (as trusted as the less trusted source) must be allowed to replace each.
pub fn forbids_merging(a: &Memory, b: &Memory) -> Option<String> {
    let (ra, rb) = (Readership::of(a), Readership::of(b));
    if !ra.same_readers(&rb) {
        return Some(format!("readership: a merge needs the same readers ({ra} vs {rb})"));
    }
    let merged = derived_trust([a.provenance.trust_level, b.provenance.trust_level]);
    forbids_trust(merged, a.provenance.trust_level, "merge into")
        .or_else(|| forbids_trust(merged, b.provenance.trust_level, "merge into"))
}

/// Trust rule for replacing, merging into and lowering: the acting memory must be trusted at least as much as the
/// one it acts on (verified > unverified > untrusted).
pub fn forbids_trust(actor: TrustLevel, target: TrustLevel, what: &str) -> Option<String> {
    (rank(actor) < rank(target))
        .then(|| format!("trust: an {} memory may not {what} a {} one", actor.as_str(), target.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(scope: Scope, owner: Option<Uuid>, agent: Option<Uuid>, sensitivity: Sensitivity) -> Readership {
        Readership { scope, owner, agent_id: agent, sensitivity }
    }

    fn memory_of(scope: Scope) -> Memory {
        Memory { scope, ..Memory::test_fixture() }
    }

    #[test]
    fn org_reaches_everything_of_its_sensitivity_and_nothing_narrower_reaches_org() {
        let (p, x) = (Some(Uuid::now_v7()), Some(Uuid::now_v7()));
        let org = r(Scope::Org, None, None, Sensitivity::Normal);
        for other in
            [r(Scope::Project, p, None, Sensitivity::Normal), r(Scope::AgentPrivate, None, x, Sensitivity::Restricted)]
        {
            assert!(org.reaches(&other), "{other}");
            assert!(!other.reaches(&org), "{other}");
        }
        // Everyone reads org memories, so who wrote one does not narrow its readers.
        assert!(org.same_readers(&r(Scope::Org, None, x, Sensitivity::Normal)));
        let authored = Memory { agent_id: x, ..memory_of(Scope::Org) };
        assert_eq!(Readership::of(&authored), org);
        assert!(!r(Scope::Org, None, None, Sensitivity::Restricted).reaches(&org));
    }

    #[test]
    fn projects_and_agents_reach_only_their_own() {
        let (p, q, x, y) = (Some(Uuid::now_v7()), Some(Uuid::now_v7()), Some(Uuid::now_v7()), Some(Uuid::now_v7()));
        let n = Sensitivity::Normal;
        assert!(r(Scope::Project, p, None, n).reaches(&r(Scope::Project, p, None, n)));
        assert!(!r(Scope::Project, p, None, n).reaches(&r(Scope::Project, q, None, n)));
        assert!(!r(Scope::Project, p, None, n).reaches(&r(Scope::Task, p, None, n)));
        assert!(!r(Scope::AgentPrivate, None, x, n).reaches(&r(Scope::AgentPrivate, None, y, n)));
        // X's project memory is read by the project and by X; X's private memory only by X.
        assert!(r(Scope::Project, p, x, n).reaches(&r(Scope::AgentPrivate, None, x, n)));
        assert!(!r(Scope::AgentPrivate, None, x, n).reaches(&r(Scope::Project, p, x, n)));
        assert!(!r(Scope::Project, p, None, n).reaches(&r(Scope::Project, p, x, n)));
    }

    #[test]
    fn a_memory_acts_only_on_memories_trusted_no_more_than_itself_and_derived_trust_is_the_least() {
        use TrustLevel::*;
        for (actor, target, allowed) in [
            (Unverified, Verified, false),
            (Untrusted, Verified, false),
            (Untrusted, Unverified, false),
            (Verified, Verified, true),
            (Verified, Untrusted, true),
            (Unverified, Unverified, true),
            (Untrusted, Untrusted, true),
        ] {
            assert_eq!(forbids_trust(actor, target, "replace").is_none(), allowed, "{actor} on {target}");
        }
        assert_eq!(derived_trust([TrustLevel::Verified, TrustLevel::Untrusted]), TrustLevel::Untrusted);
    }
}
