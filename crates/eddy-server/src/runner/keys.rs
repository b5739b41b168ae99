//! Idempotency keys of HTTP ingress requests: a client that did not get
//! the answer to a request sends it again with the same `Idempotency-Key`
//! header, and a request whose key was already applied is answered
//! without being applied twice. The keys of the last [`KEPT_KEYS`]
//! keyed requests are remembered: in the feeder while the pipeline runs
//! (with the requests still in flight), in each checkpoint's positions for
//! the requests its state holds, and in the journal records of those
//! after it, so that a restart remembers exactly the requests it kept.

use std::collections::{HashMap, HashSet, VecDeque};

/// Keyed requests remembered.
pub const KEPT_KEYS: usize = 10_000;

/// Longest key accepted.
pub const MAX_KEY_BYTES: usize = 255;

/// What a request's key says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Not seen: the request goes ahead, the key held in flight.
    New,
    /// Applied before, with this many rows: not applied again.
    Applied(u64),
    /// A request with the key is being applied now.
    InFlight,
}

/// The keys of recent keyed requests.
#[derive(Debug, Default)]
pub struct Keys {
    order: VecDeque<String>,
    applied: HashMap<String, u64>,
    in_flight: HashSet<String>,
}

impl Keys {
    /// Keys applied before, oldest first (a checkpoint's).
    pub fn seeded(keys: &[(String, u64)]) -> Self {
        let mut k = Self::default();
        for (key, rows) in keys {
            k.remember(key.clone(), *rows);
        }
        k
    }

    /// Claims `key` for a request about to be applied.
    pub fn claim(&mut self, key: &str) -> Claim {
        if let Some(rows) = self.applied.get(key) {
            return Claim::Applied(*rows);
        }
        if !self.in_flight.insert(key.to_string()) {
            return Claim::InFlight;
        }
        Claim::New
    }

    /// Lets go of a claimed key whose request was not applied.
    pub fn release(&mut self, key: &str) {
        self.in_flight.remove(key);
    }

    /// Records that the request with `key` was applied with `rows` rows,
    /// forgetting the oldest key past [`KEPT_KEYS`].
    pub fn remember(&mut self, key: String, rows: u64) {
        self.in_flight.remove(&key);
        if self.applied.insert(key.clone(), rows).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > KEPT_KEYS {
            if let Some(old) = self.order.pop_front() {
                self.applied.remove(&old);
            }
        }
    }
}

/// Keeps the last [`KEPT_KEYS`] of a checkpoint's list of keys (it grows
/// by one per keyed request and is trimmed in batches).
pub fn trim(keys: &mut Vec<(String, u64)>) {
    if keys.len() > KEPT_KEYS + KEPT_KEYS / 10 {
        keys.drain(..keys.len() - KEPT_KEYS);
    }
}

/// Whether `key` is an acceptable idempotency key: 1 to
/// [`MAX_KEY_BYTES`] visible ASCII characters.
pub fn valid(key: &str) -> bool {
    (1..=MAX_KEY_BYTES).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_claimed_once_and_remembered_until_pushed_out() {
        let mut k = Keys::default();
        assert_eq!(k.claim("a"), Claim::New);
        assert_eq!(k.claim("a"), Claim::InFlight);
        k.release("a");
        assert_eq!(k.claim("a"), Claim::New);
        k.remember("a".into(), 3);
        assert_eq!(k.claim("a"), Claim::Applied(3));
        for i in 0..KEPT_KEYS {
            k.remember(format!("k{i}"), 1);
        }
        assert_eq!(k.claim("a"), Claim::New, "the oldest key is forgotten");
        assert_eq!(k.claim("k0"), Claim::Applied(1));
        let again = Keys::seeded(&[("x".into(), 7)]);
        assert_eq!(again.applied.get("x"), Some(&7));
        assert!(valid("order-17") && !valid("") && !valid("a b") && !valid(&"x".repeat(256)));
    }
}
