//! What an output could not write yet: each step's writes wait here, in
//! order, until the system takes them. A failure backs the outbox off (100
//! ms doubling to 30 s) so that the steps after it only queue instead of
//! each waiting on the system; the worker retries while it is idle
//! ([`Sink::retry`](crate::runner::Sink::retry)); a checkpoint tries at
//! once and fails while anything waits, so a recovery replays what never
//! went out and no step's output is skipped.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::runner::SinkStatus;

/// Waits before try `attempt` (from 1): 100 ms doubling, at most 30 s.
pub fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(100u64.saturating_mul(1 << attempt.min(9))).min(Duration::from_secs(30))
}

/// Writes waiting for a system, oldest first, each with the records and
/// bytes it holds.
#[derive(Debug)]
pub struct Outbox<T> {
    waiting: VecDeque<(T, u64, u64)>,
    failures: u32,
    next_try: Option<Instant>,
    last_error: Option<String>,
}

/// Why writes are still waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// Whether they were tried now (else the outbox is backing off).
    pub tried: bool,
    /// What is waiting, and the last failure.
    pub message: String,
}

impl<T> Default for Outbox<T> {
    fn default() -> Self {
        Self {
            waiting: VecDeque::new(),
            failures: 0,
            next_try: None,
            last_error: None,
        }
    }
}

impl<T> Outbox<T> {
    /// Adds a step's writes.
    pub fn push(&mut self, writes: T, records: u64, bytes: u64) {
        self.waiting.push_back((writes, records, bytes));
    }

    /// Sends what waits through `send`, in order, stopping at the first
    /// failure; `now` tries even while backing off (a checkpoint). The
    /// records and bytes sent.
    pub fn send(
        &mut self,
        now: bool,
        mut send: impl FnMut(&T) -> Result<(), String>,
    ) -> Result<(u64, u64), Waiting> {
        if !now && self.next_try.is_some_and(|t| Instant::now() < t) {
            return Err(Waiting {
                tried: false,
                message: format!(
                    "{} steps wait to be written after: {}",
                    self.waiting.len(),
                    self.last_error.as_deref().unwrap_or("a failure")
                ),
            });
        }
        let (mut records, mut bytes) = (0, 0);
        while let Some((head, r, b)) = self.waiting.front() {
            if let Err(e) = send(head) {
                self.failures += 1;
                self.next_try = Some(Instant::now() + backoff(self.failures));
                let message = format!("{} steps wait to be written: {e}", self.waiting.len());
                self.last_error = Some(e);
                return Err(Waiting {
                    tried: true,
                    message,
                });
            }
            records += r;
            bytes += b;
            self.waiting.pop_front();
            self.failures = 0;
            self.next_try = None;
        }
        Ok((records, bytes))
    }

    /// A step's writes, sent with those waiting before them: what the
    /// worker counts.
    pub fn write(
        &mut self,
        writes: T,
        records: u64,
        bytes: u64,
        send: impl FnMut(&T) -> Result<(), String>,
    ) -> SinkStatus {
        self.push(writes, records, bytes);
        match self.send(false, send) {
            Ok((records, bytes)) => SinkStatus::Written { records, bytes },
            Err(w) => SinkStatus::Failed(w.message),
        }
    }

    /// Tries what waits while the worker is idle: nothing to report when
    /// nothing waits or the outbox is backing off.
    pub fn retry(&mut self, send: impl FnMut(&T) -> Result<(), String>) -> Option<SinkStatus> {
        if self.waiting.is_empty() {
            return None;
        }
        match self.send(false, send) {
            Ok((records, bytes)) => Some(SinkStatus::Written { records, bytes }),
            Err(w) if w.tried => Some(SinkStatus::Failed(w.message)),
            Err(_) => None,
        }
    }

    /// Sends everything now (a checkpoint, a stop): fails while anything
    /// still waits.
    pub fn send_all(&mut self, send: impl FnMut(&T) -> Result<(), String>) -> Result<(), String> {
        self.send(true, send).map(|_| ()).map_err(|w| w.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_go_in_order_and_wait_after_a_failure() {
        let mut out = Outbox::default();
        let mut sent = Vec::new();
        out.push(1, 10, 100);
        let status = out.write(2, 20, 200, |&n| {
            if n == 2 {
                Err("down".into())
            } else {
                sent.push(n);
                Ok(())
            }
        });
        assert!(
            matches!(status, SinkStatus::Failed(ref e) if e.contains("down")),
            "{status:?}"
        );
        assert_eq!(sent, [1]);
        // Backing off: the next step only queues, and an idle retry says
        // nothing.
        let status = out.write(3, 30, 300, |_| panic!("not tried"));
        assert!(matches!(status, SinkStatus::Failed(ref e) if e.contains("2 steps wait")));
        assert!(out.retry(|_| panic!("not tried")).is_none());
        // A checkpoint tries at once.
        out.send_all(|&n| {
            sent.push(n);
            Ok(())
        })
        .unwrap();
        assert_eq!(sent, [1, 2, 3]);
        assert!(out.retry(|_| panic!("nothing waits")).is_none());
    }
}
