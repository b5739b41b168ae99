//! The loop of an input that polls its source in rounds (a database's
//! replication slot, a table's log): a round reads what there is; when it
//! found nothing new, the input waits a poll interval; when it failed, the
//! error goes into the connector's status and the round is tried again
//! with backoff, unless going on would lose or double rows.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::outbox::backoff;
use super::{sleep_unless_stopping, wait_while_paused};
use crate::runner::Feeder;
use crate::stats::EndpointStats;

/// What a round did.
pub enum Round {
    /// Fed something: another round at once.
    Fed,
    /// Nothing new: the next round after the poll interval.
    Idle,
    /// The input is complete (its end is reported).
    Ended,
    /// The pipeline is stopping.
    Stopped,
}

/// Why a round failed.
#[derive(Debug)]
pub enum Failure {
    /// Tried again with backoff.
    Retry(String),
    /// The input cannot go on without losing or doubling rows: it stops,
    /// its error in its status.
    Fatal(String),
}

impl Failure {
    /// The same failure with its message changed (given a place).
    pub fn map(self, f: impl FnOnce(String) -> String) -> Self {
        match self {
            Self::Retry(e) => Self::Retry(f(e)),
            Self::Fatal(e) => Self::Fatal(f(e)),
        }
    }
}

/// An input read in rounds.
pub trait Rounds {
    /// Reads what there is.
    fn round(&mut self) -> Result<Round, Failure>;
    /// After a failed round (a connection to make again).
    fn failed(&mut self) {}
}

/// Runs rounds until the input ends, fails for good or the pipeline
/// stops. `what` names the transport in logs.
pub fn run(
    input: &mut impl Rounds,
    feeder: &Feeder,
    stats: &EndpointStats,
    what: &str,
    poll: Duration,
) {
    let mut failures = 0;
    loop {
        if !wait_while_paused(feeder) {
            return;
        }
        match input.round() {
            Ok(Round::Fed) => failures = 0,
            Ok(Round::Idle) => {
                failures = 0;
                if !sleep_unless_stopping(feeder, poll) {
                    return;
                }
            }
            Ok(Round::Ended) => {
                stats.end_of_input.store(true, Ordering::Relaxed);
                return;
            }
            Ok(Round::Stopped) => return,
            Err(Failure::Retry(e)) => {
                tracing::warn!(connector = %stats.name, error = %e, "{what} failed; trying again");
                stats.error(e);
                input.failed();
                failures += 1;
                if !sleep_unless_stopping(feeder, backoff(failures)) {
                    return;
                }
            }
            Err(Failure::Fatal(e)) => {
                tracing::error!(connector = %stats.name, error = %e, "{what} stopped");
                stats.fatal(e);
                return;
            }
        }
    }
}
