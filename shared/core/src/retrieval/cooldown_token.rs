//! The passive cooldown carried by the caller. The in-process cooldown sees only the turns its own warm
//! instance served; every passive answer therefore also returns a compact, HMAC-signed token naming the memories
//! injected into the session in its last turns, and a request that sends it back gets the exact cooldown on any
//! instance, after any restart. A token for another organisation, agent or session, or with a bad signature, is
//! ignored (the in-process state still applies), so a key rotation costs at most one cooldown window.
//!
//! Layout (then base64url): version 2, organisation (16 bytes), the first 8 bytes of sha256(agent id, or 16 zero
//! bytes without an agent, then the session id), then per memory its id (16) and turn (4, big-endian), then the
//! first 16 bytes of HMAC-SHA256 over all of it.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::cooldown::Session;

/// Memories a token names at most (the most recently returned are kept).
pub const MAX_TOKEN_ENTRIES: usize = 100;
/// Longest token accepted, in characters.
pub const MAX_TOKEN_CHARS: usize = 4096;
const VERSION: u8 = 2;
const HEADER: usize = 1 + 16 + 8;
const ENTRY: usize = 16 + 4;
const MAC: usize = 16;

/// The signing key, shared by every instance (`MEMORY_COOLDOWN_KEY`).
#[derive(Clone)]
pub struct TokenKey([u8; 32]);

impl TokenKey {
    /// A key derived from a configured secret of at least 32 bytes.
    pub fn from_secret(secret: &[u8]) -> Result<Self, String> {
        if secret.len() < 32 {
            return Err("MEMORY_COOLDOWN_KEY must have at least 32 bytes".into());
        }
        Ok(Self(Sha256::digest(secret).into()))
    }

    /// A key of this process only (tokens then carry the cooldown across restarts of nothing: set a shared key).
    pub fn random() -> Self {
        let mut key = [0u8; 32];
        key.iter_mut()
            .zip(Uuid::new_v4().as_bytes().iter().chain(Uuid::new_v4().as_bytes()))
            .for_each(|(k, r)| *k = *r);
        Self(key)
    }

    fn mac(&self) -> Hmac<Sha256> {
        <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes any key length")
    }
}

fn session_hash(session: &Session) -> [u8; 8] {
    let agent = session.agent_id.unwrap_or(Uuid::nil());
    let digest = Sha256::new().chain_update(agent.as_bytes()).chain_update(session.session_id.as_bytes()).finalize();
    digest[..8].try_into().expect("8 bytes")
}

/// Signs the cooldown of a session: memory ids with the turn each was returned at.
pub fn encode(key: &TokenKey, session: &Session, entries: &[(Uuid, u32)]) -> String {
    let mut bytes = Vec::with_capacity(HEADER + entries.len().min(MAX_TOKEN_ENTRIES) * ENTRY + MAC);
    bytes.push(VERSION);
    bytes.extend_from_slice(session.organization_id.as_bytes());
    bytes.extend_from_slice(&session_hash(session));
    let mut newest: Vec<&(Uuid, u32)> = entries.iter().collect();
    newest.sort_by_key(|(id, turn)| (std::cmp::Reverse(*turn), *id));
    for (id, turn) in newest.into_iter().take(MAX_TOKEN_ENTRIES) {
        bytes.extend_from_slice(id.as_bytes());
        bytes.extend_from_slice(&turn.to_be_bytes());
    }
    let mut mac = key.mac();
    mac.update(&bytes);
    bytes.extend_from_slice(&mac.finalize().into_bytes()[..MAC]);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The entries of a token signed with `key` for this organisation and session; None for any other token.
pub fn decode(key: &TokenKey, session: &Session, token: &str) -> Option<Vec<(Uuid, u32)>> {
    if token.len() > MAX_TOKEN_CHARS {
        return None;
    }
    let bytes = URL_SAFE_NO_PAD.decode(token).ok()?;
    if bytes.len() < HEADER + MAC || !(bytes.len() - HEADER - MAC).is_multiple_of(ENTRY) {
        return None;
    }
    let (payload, tag) = bytes.split_at(bytes.len() - MAC);
    let mut mac = key.mac();
    mac.update(payload);
    mac.verify_truncated_left(tag).ok()?;
    let same_session = payload[0] == VERSION
        && payload[1..17] == *session.organization_id.as_bytes()
        && payload[17..HEADER] == session_hash(session);
    same_session.then(|| {
        payload[HEADER..]
            .chunks_exact(ENTRY)
            .map(|e| {
                (
                    Uuid::from_slice(&e[..16]).expect("16 bytes"),
                    u32::from_be_bytes(e[16..].try_into().expect("4 bytes")),
                )
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(organization_id: Uuid, agent_id: Option<Uuid>, id: &str) -> Session {
        Session { organization_id, agent_id, session_id: id.into() }
    }

    #[test]
    fn a_token_opens_only_with_its_key_organisation_agent_and_session() {
        let key = TokenKey::from_secret(b"a cooldown key of at least 32 bytes!").unwrap();
        let (org, agent, memory) = (Uuid::now_v7(), Some(Uuid::now_v7()), Uuid::now_v7());
        let token = encode(&key, &session(org, agent, "s-1"), &[(memory, 7)]);
        assert_eq!(decode(&key, &session(org, agent, "s-1"), &token), Some(vec![(memory, 7)]));
        assert_eq!(decode(&key, &session(org, agent, "s-2"), &token), None);
        assert_eq!(decode(&key, &session(Uuid::now_v7(), agent, "s-1"), &token), None);
        assert_eq!(decode(&key, &session(org, Some(Uuid::now_v7()), "s-1"), &token), None);
        assert_eq!(decode(&key, &session(org, None, "s-1"), &token), None);
        assert_eq!(decode(&TokenKey::random(), &session(org, agent, "s-1"), &token), None);
        let mut forged = URL_SAFE_NO_PAD.decode(&token).unwrap();
        forged[HEADER + 16 + 3] ^= 1;
        assert_eq!(decode(&key, &session(org, agent, "s-1"), &URL_SAFE_NO_PAD.encode(forged)), None);
        assert!(TokenKey::from_secret(b"short").is_err());
    }

    proptest::proptest! {
        /// Any session's entries come back from its own token (the newest hundred), and no other organisation,
        /// agent or session opens it.
        #[test]
        fn a_token_round_trips_and_opens_for_no_other_session(
            org in proptest::array::uniform16(proptest::prelude::any::<u8>()),
            agent in proptest::option::of(proptest::array::uniform16(proptest::prelude::any::<u8>())),
            session_id in ".{0,128}",
            other_id in ".{0,128}",
            turns in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..150),
        ) {
            let key = TokenKey::from_secret(b"a cooldown key of at least 32 bytes!").unwrap();
            let s = session(Uuid::from_bytes(org), agent.map(Uuid::from_bytes), &session_id);
            let entries: Vec<(Uuid, u32)> = turns.iter().map(|turn| (Uuid::new_v4(), *turn)).collect();
            let token = encode(&key, &s, &entries);
            let opened = decode(&key, &s, &token).unwrap();
            proptest::prop_assert_eq!(opened.len(), entries.len().min(MAX_TOKEN_ENTRIES));
            proptest::prop_assert!(opened.iter().all(|e| entries.contains(e)));
            let newest_left_out = entries.iter().filter(|e| !opened.contains(e)).map(|(_, t)| *t).max();
            let oldest_kept = opened.iter().map(|(_, t)| *t).min();
            if let (Some(left_out), Some(kept)) = (newest_left_out, oldest_kept) {
                proptest::prop_assert!(left_out <= kept, "a newer entry was dropped for an older one");
            }
            let mut others = vec![
                session(Uuid::new_v4(), s.agent_id, &session_id),
                session(s.organization_id, Some(Uuid::new_v4()), &session_id),
            ];
            if s.agent_id.is_some() {
                others.push(session(s.organization_id, None, &session_id));
            }
            if other_id != session_id {
                others.push(session(s.organization_id, s.agent_id, &other_id));
            }
            for other in others {
                proptest::prop_assert_eq!(decode(&key, &other, &token), None, "{:?}", other);
            }
        }
    }

    #[test]
    fn a_token_keeps_the_newest_entries_and_stays_small() {
        let key = TokenKey::random();
        let s = session(Uuid::nil(), None, "s");
        let entries: Vec<(Uuid, u32)> = (0..300).map(|i| (Uuid::now_v7(), i)).collect();
        let token = encode(&key, &s, &entries);
        assert!(token.len() <= MAX_TOKEN_CHARS);
        let kept = decode(&key, &s, &token).unwrap();
        assert_eq!(kept.len(), MAX_TOKEN_ENTRIES);
        assert!(kept.iter().all(|(_, turn)| *turn >= 200));
    }
}
