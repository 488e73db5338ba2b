//! Passive-injection cooldown: a memory returned to a session is withheld for that session's next turns. A session
//! is one agent's (or, without an agent, the calling service's) conversation in one organisation: two agents using
//! the same session id do not share a cooldown. State lives in this process (the signed token of
//! [`super::cooldown_token`] carries it across instances) and is bounded: the least recently used sessions are
//! forgotten first.

use std::{
    collections::{HashMap, HashSet},
    num::NonZeroUsize,
    sync::Mutex,
};

use lru::LruCache;
use uuid::Uuid;

/// Turns after a return during which a memory is withheld (returned at turn t: withheld t+1..t+4, back at t+5).
pub const COOLDOWN_TURNS: u32 = 5;

/// Whose conversation a cooldown belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Session {
    pub organization_id: Uuid,
    pub agent_id: Option<Uuid>,
    pub session_id: String,
}

pub struct CooldownTracker {
    window: u32,
    sessions: Mutex<LruCache<Session, HashMap<Uuid, u32>>>,
}

impl CooldownTracker {
    pub fn new(max_sessions: usize) -> Self {
        let capacity = NonZeroUsize::new(max_sessions.max(1)).expect("at least one session");
        Self { window: COOLDOWN_TURNS, sessions: Mutex::new(LruCache::new(capacity)) }
    }

    /// Memories withheld from this session at this turn.
    pub fn cooling(&self, session: &Session, turn: u32) -> HashSet<Uuid> {
        let mut sessions = self.sessions.lock().expect("cooldown lock");
        let Some(returned) = sessions.get(session) else {
            return HashSet::new();
        };
        returned.iter().filter(|(_, at)| **at <= turn && turn - **at < self.window).map(|(id, _)| *id).collect()
    }

    /// Records what was returned to this session at this turn, forgetting entries that no longer matter.
    pub fn record(&self, session: &Session, turn: u32, memories: impl IntoIterator<Item = Uuid>) {
        let mut sessions = self.sessions.lock().expect("cooldown lock");
        let returned = sessions.get_or_insert_mut(session.clone(), HashMap::new);
        returned.retain(|_, at| *at > turn || turn - *at < self.window);
        for id in memories {
            returned.insert(id, turn);
        }
    }

    /// What this instance returned to the session, with the turn of each, for the turns that still matter at
    /// `turn`.
    pub fn entries(&self, session: &Session, turn: u32) -> Vec<(Uuid, u32)> {
        let mut sessions = self.sessions.lock().expect("cooldown lock");
        sessions.get(session).map_or_else(Vec::new, |returned| {
            returned.iter().filter(|(_, at)| self.still_cooling(**at, turn)).map(|(id, at)| (*id, *at)).collect()
        })
    }

    /// Whether a memory returned at turn `at` still matters at `turn` (it is cooling, or from a later turn).
    pub fn still_cooling(&self, at: u32, turn: u32) -> bool {
        at > turn || turn - at < self.window
    }

    /// Whether a memory returned at turn `at` is withheld at `turn`.
    pub fn withheld(&self, at: u32, turn: u32) -> bool {
        at <= turn && turn - at < self.window
    }

    /// Sessions currently tracked.
    pub fn len(&self) -> usize {
        self.sessions.lock().expect("cooldown lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(organization_id: Uuid, agent_id: Option<Uuid>, id: &str) -> Session {
        Session { organization_id, agent_id, session_id: id.into() }
    }

    #[test]
    fn memory_returned_at_turn_one_is_withheld_for_turns_two_to_five_and_back_at_six() {
        let tracker = CooldownTracker::new(10);
        let s = session(Uuid::now_v7(), None, "s");
        let m = Uuid::now_v7();
        tracker.record(&s, 1, [m]);
        for turn in 2..=5 {
            assert!(tracker.cooling(&s, turn).contains(&m), "turn {turn}");
        }
        assert!(!tracker.cooling(&s, 6).contains(&m));
    }

    #[test]
    fn sessions_agents_and_organisations_do_not_share_cooldowns() {
        let tracker = CooldownTracker::new(10);
        let (org, other_org, agent, m) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        tracker.record(&session(org, Some(agent), "s"), 1, [m]);
        assert!(tracker.cooling(&session(org, Some(agent), "other-session"), 2).is_empty());
        assert!(tracker.cooling(&session(other_org, Some(agent), "s"), 2).is_empty());
        assert!(tracker.cooling(&session(org, Some(Uuid::now_v7()), "s"), 2).is_empty());
        assert!(tracker.cooling(&session(org, None, "s"), 2).is_empty());
    }

    #[test]
    fn state_is_bounded_by_the_session_capacity() {
        let tracker = CooldownTracker::new(3);
        let org = Uuid::now_v7();
        for i in 0..100 {
            tracker.record(&session(org, None, &format!("s{i}")), 1, [Uuid::now_v7()]);
        }
        assert_eq!(tracker.len(), 3);
    }
}
