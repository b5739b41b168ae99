//! `postgres_cdc_input`: a table fed from a PostgreSQL table, first its
//! rows (a snapshot), then its inserts, updates and deletes as logical
//! replication decodes them (`pgoutput`), with Feldera's configuration
//! (`uri`, `publication`, `source_table`).
//!
//! The stream is read through a replication slot the connector owns
//! (`eddy_` and a hash of the pipeline's id and the connector's name) with
//! `pg_logical_slot_peek_binary_changes`, which decodes from the slot's
//! confirmed position on without consuming anything. The slot is moved on
//! (`pg_replication_slot_advance`) only to what the state holds for good:
//! under exactly-once fault tolerance, the position of the older of the two
//! checkpoints kept (a recovery may start from it when the newer is
//! damaged); otherwise what has been fed (a restart without fault tolerance
//! starts again from a snapshot). Each read goes up to the WAL written
//! then; when all of it comes back, the position moves past it, so a
//! source table that is idle does not keep the slot, and the WAL, behind. A start without state drops the slot of
//! an earlier run and makes it again; a pipeline without fault tolerance
//! drops it when it stops, and clearing a pipeline's storage or deleting
//! the pipeline drops it ([`Transport::release`]), so its WAL is not held
//! for nothing.
//!
//! **Snapshot and stream, without loss or duplication.** The slot is made
//! first; then the rows are read in a `REPEATABLE READ` transaction whose
//! snapshot (`pg_current_snapshot()`: which transactions it sees) and WAL
//! position are recorded. A transaction the stream brings that committed
//! before that position and that the snapshot sees is already in its rows
//! and is skipped; every other is applied. The snapshot enters the state
//! whole: checkpoints wait while it is read (the [`Feeder`]'s hold), so a
//! checkpoint never holds part of it.
//!
//! **Rows.** Columns are matched by name; each NOT NULL column of the
//! table must exist in PostgreSQL's, and PostgreSQL's columns the table
//! lacks are ignored. An update retracts the old row and inserts the new,
//! a delete retracts the old row: the source table must have `REPLICA
//! IDENTITY FULL` (checked at start) so that the old rows arrive whole, as
//! Feldera advises. Values arrive as PostgreSQL's text and are read as
//! [`super::text`] says; a row that does not read is rejected and reported
//! with its LSN. `TRUNCATE` cannot be followed row by row: it stops the
//! connector with an error (publish without it: `WITH (publish = 'insert,
//! update, delete')`).
//!
//! A server, table, publication or slot that is missing is an error in the
//! connector's status, tried again with backoff.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio_postgres::Client;

use super::pgoutput::{self, Lsn, Message};
use super::rows::{literal, simple, Target, SESSION};
use super::tls::TlsSettings;
use super::{connect, quoted, table_sql, Server};
use crate::connector::blocking::block_on;
use crate::connector::rounds::{self, Failure, Round, Rounds};
use crate::connector::{
    position, CheckContext, ConnectorSpec, FileAccess, InputContext, InputRun, Transport,
};
use crate::runner::Origin;

/// How long to wait when the stream has nothing new.
const POLL: Duration = Duration::from_millis(200);
/// Messages read from the slot at once, beyond those read before.
const BATCH: u64 = 50_000;
/// How often a position past transactions of other tables is recorded.
const IDLE_POSITION: Duration = Duration::from_secs(5);

/// `postgres_cdc_input`'s configuration (Feldera's).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresCdcInput {
    /// A connection URL; the user needs the `REPLICATION` attribute.
    uri: String,
    /// A publication that includes the source table.
    publication: String,
    /// The table replicated (`schema.table` or `table`).
    source_table: String,
    /// TLS: the CA certificates (Feldera's CDC connector takes no client
    /// certificate).
    ssl_ca_pem: Option<String>,
    ssl_ca_location: Option<String>,
}

impl PostgresCdcInput {
    fn tls(&self) -> TlsSettings {
        TlsSettings {
            ca_pem: self.ssl_ca_pem.clone(),
            ca_location: self.ssl_ca_location.clone(),
            ..TlsSettings::default()
        }
    }
}

impl Transport for PostgresCdcInput {
    fn check(&self, _spec: &ConnectorSpec, cx: &CheckContext<'_>) -> Result<(), String> {
        Server::check(&self.uri, &self.tls(), cx.files)?;
        if self.publication.is_empty() {
            return Err("'publication' is empty".into());
        }
        if self.source_table.is_empty() {
            return Err("'source_table' is empty".into());
        }
        Ok(())
    }

    fn start_input(
        &self,
        spec: &ConnectorSpec,
        cx: InputContext<'_>,
    ) -> Result<Option<InputRun>, String> {
        let exactly_once = cx.position.is_some();
        let at: CdcPosition = position(cx.position)?;
        let slot = at
            .slot
            .clone()
            .unwrap_or_else(|| slot_name(cx.pipeline_id, &spec.name));
        let source = format!("'{}'", self.source_table);
        let target = Target::new(spec, cx.feeder, cx.stats, &source)?;
        let server = Server::new(&self.uri, &self.tls(), cx.files)?;
        let mut cdc = Cdc {
            server,
            config: self.clone(),
            target,
            slot,
            exactly_once,
            at,
            client: None,
            table: None,
            read: VecDeque::new(),
            advanced: None,
            last_fed: std::time::Instant::now(),
        };
        Ok(Some(Box::new(move || cdc.run())))
    }

    /// Drops the connector's slot: once the pipeline's state is gone, the
    /// slot's position means nothing and would only hold the WAL.
    fn release(
        &self,
        spec: &ConnectorSpec,
        pipeline_id: &str,
        files: &FileAccess,
    ) -> Result<(), String> {
        let slot = slot_name(pipeline_id, &spec.name);
        let server = Server::new(&self.uri, &self.tls(), files)?.with_timeout();
        let client = connect(&server)?;
        simple(&client, &drop_slot_sql(&slot)).map_err(|f| {
            let (Failure::Retry(e) | Failure::Fatal(e)) = f;
            format!(
                "dropping replication slot '{slot}': {e}; drop it with {}",
                drop_slot_sql(&slot)
            )
        })?;
        tracing::info!(slot = %slot, "replication slot dropped");
        Ok(())
    }
}

/// Drops a slot, if it is there.
fn drop_slot_sql(slot: &str) -> String {
    format!(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = {}",
        literal(slot)
    )
}

/// The slot of a pipeline's connector: a name PostgreSQL takes (lower
/// case, at most 63 bytes) that the same pipeline and connector give again.
/// The pipeline is named by its id, unique across servers: two servers
/// with a pipeline of one name reading one database must not share (and
/// drop) each other's slot.
fn slot_name(pipeline_id: &str, connector: &str) -> String {
    let key = format!("{pipeline_id}\u{0}{connector}");
    format!(
        "eddy_{:016x}",
        twox_hash::XxHash64::oneshot(0, key.as_bytes())
    )
}

/// How far the state holds the source table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CdcPosition {
    /// The slot read; `None` before the snapshot is in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    slot: Option<String>,
    /// Transactions committed before this are in the state.
    #[serde(default)]
    after: Lsn,
    /// The snapshot's, while transactions it saw may still come.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshot: Option<Snapshot>,
}

/// The snapshot the rows were read in: the transactions it sees
/// (`xmin:xmax:xip,…`, as `pg_current_snapshot()` writes them) and the WAL
/// position after every commit it sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Snapshot {
    xids: String,
    until: Lsn,
}

/// A snapshot's transactions, as 64-bit transaction ids.
struct Xids {
    xmin: u64,
    xmax: u64,
    running: Vec<u64>,
}

impl Xids {
    fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("'{text}' is not a snapshot");
        let mut parts = text.split(':');
        let mut next = || parts.next().ok_or_else(bad);
        let xmin = next()?.parse().map_err(|_| bad())?;
        let xmax = next()?.parse().map_err(|_| bad())?;
        let running = next()?
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            xmin,
            xmax,
            running,
        })
    }

    /// Whether the snapshot sees the (committed) transaction `xid`, a
    /// 32-bit id as the stream gives it, near the snapshot's.
    fn sees(&self, xid: u32) -> bool {
        let distance = xid.wrapping_sub(self.xmax as u32) as i32 as i64;
        let full = (self.xmax as i64 + distance) as u64;
        full < self.xmin || (full < self.xmax && !self.running.contains(&full))
    }
}

/// The source table as this connection knows it (the columns go to the
/// [`Target`]).
struct Source {
    oid: u32,
}

impl Rounds for Cdc {
    fn round(&mut self) -> Result<Round, Failure> {
        Ok(match self.read()? {
            true => Round::Fed,
            false => Round::Idle,
        })
    }

    fn failed(&mut self) {
        if self.client.as_ref().is_some_and(|c| c.is_closed()) {
            self.client = None;
            self.table = None;
            self.advanced = None;
        }
    }
}

/// A running connector.
struct Cdc {
    server: Server,
    config: PostgresCdcInput,
    /// The table fed, and the source table's columns in it.
    target: Target,
    slot: String,
    exactly_once: bool,
    at: CdcPosition,
    client: Option<Arc<Client>>,
    table: Option<Source>,
    /// Transactions read from the slot past its confirmed position: where
    /// each ends and the messages it took, so a read asks for them too.
    read: VecDeque<(Lsn, u64)>,
    /// Where the slot was last moved to (`None`: not known on this run).
    advanced: Option<Lsn>,
    /// When a position was last fed.
    last_fed: std::time::Instant,
}

impl Cdc {
    fn run(&mut self) {
        let (feeder, stats) = (
            Arc::clone(&self.target.feeder),
            Arc::clone(&self.target.stats),
        );
        rounds::run(self, &feeder, &stats, "postgres_cdc_input", POLL);
        if !self.exactly_once {
            // Nothing resumes from this slot: do not hold WAL for it.
            if let Err(Failure::Retry(e) | Failure::Fatal(e)) = self.drop_slot() {
                tracing::warn!(slot = %self.slot, error = %e, "dropping the replication slot failed");
            }
        }
    }

    fn client(&mut self) -> Result<Arc<Client>, Failure> {
        if let Some(c) = self.client.as_ref().filter(|c| !c.is_closed()) {
            return Ok(Arc::clone(c));
        }
        let c = connect(&self.server).map_err(Failure::Retry)?;
        simple(&c, SESSION)?;
        self.client = Some(Arc::clone(&c));
        Ok(c)
    }

    /// One round: the snapshot when none is in yet, then what the stream
    /// has. Whether anything was fed.
    fn read(&mut self) -> Result<bool, Failure> {
        let client = self.client()?;
        if self.table.is_none() {
            self.table = Some(self.source(&client)?);
        }
        if self.at.slot.is_none() {
            self.snapshot(&client)?;
            return Ok(true);
        }
        self.advance(&client)?;
        self.stream(&client)
    }

    /// Checks the server and the source table, and finds its columns.
    fn source(&mut self, client: &Arc<Client>) -> Result<Source, Failure> {
        let level = simple(client, "SHOW wal_level")?;
        if level
            .first()
            .and_then(|r| r.first())
            .and_then(Option::as_deref)
            != Some("logical")
        {
            return Err(Failure::Retry(
                "PostgreSQL's wal_level is not 'logical' (set wal_level = logical and restart the server)".into(),
            ));
        }
        let t = &self.config.source_table;
        let found = simple(
            client,
            &format!(
                "SELECT c.oid, c.relreplident, n.nspname, c.relname FROM pg_class c \
                 JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass({})",
                literal(&table_sql(t))
            ),
        )?;
        let Some(row) = found.first() else {
            return Err(Failure::Retry(format!("table '{t}' does not exist")));
        };
        let text = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
        let oid: u32 = text(0)
            .parse()
            .map_err(|_| Failure::Retry("pg_class.oid".into()))?;
        if text(1) != "f" {
            return Err(Failure::Retry(format!(
                "table '{t}' must send whole old rows: ALTER TABLE {} REPLICA IDENTITY FULL",
                table_sql(t)
            )));
        }
        let published = simple(
            client,
            &format!(
                "SELECT 1 FROM pg_publication_tables WHERE pubname = {} AND schemaname = {} AND tablename = {}",
                literal(&self.config.publication),
                literal(&text(2)),
                literal(&text(3))
            ),
        )?;
        if published.is_empty() {
            return Err(Failure::Retry(format!(
                "publication '{}' does not exist or does not include '{t}' (CREATE PUBLICATION {} FOR TABLE {})",
                self.config.publication,
                quoted(&self.config.publication),
                table_sql(t)
            )));
        }
        let columns = simple(
            client,
            &format!(
                "SELECT attname, atttypid FROM pg_attribute WHERE attrelid = {oid} \
                 AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
            ),
        )?;
        let columns: Vec<(String, u32)> = columns
            .into_iter()
            .map(|r| {
                let name = r.first().cloned().flatten().unwrap_or_default();
                let ty = r.get(1).cloned().flatten().and_then(|s| s.parse().ok());
                (name, ty.unwrap_or(0))
            })
            .collect();
        self.target
            .match_columns(&columns)
            .map_err(Failure::Retry)?;
        Ok(Source { oid })
    }

    /// Reports a change at `at` that could not be read.
    fn reject(&self, at: Lsn, e: &str) {
        self.target.reject(&format!("at LSN {at}"), e);
    }

    fn drop_slot(&mut self) -> Result<(), Failure> {
        let client = self.client()?;
        simple(&client, &drop_slot_sql(&self.slot))?;
        Ok(())
    }

    /// Makes the slot and reads the table's rows; once they are fed, the
    /// stream goes on from the slot.
    fn snapshot(&mut self, client: &Arc<Client>) -> Result<(), Failure> {
        self.drop_slot()?;
        // The slot's consistent point: the stream holds every transaction
        // committed after it.
        let made = simple(
            client,
            &format!(
                "SELECT lsn::text FROM pg_create_logical_replication_slot({}, 'pgoutput')",
                literal(&self.slot)
            ),
        )?;
        let start: Lsn = made
            .first()
            .and_then(|r| r.first().cloned().flatten())
            .ok_or_else(|| Failure::Retry("the slot's position was not given".into()))?
            .parse()
            .map_err(Failure::Retry)?;
        simple(client, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")?;
        let read = self.read_snapshot(client, start);
        let _ = simple(client, "ROLLBACK");
        read
    }

    fn read_snapshot(&mut self, client: &Arc<Client>, start: Lsn) -> Result<(), Failure> {
        let seen = simple(
            client,
            "SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text",
        )?;
        let value = |i: usize| seen.first().and_then(|r| r.get(i).cloned().flatten());
        let (Some(xids), Some(until)) = (value(0), value(1)) else {
            return Err(Failure::Retry(
                "the snapshot's position was not given".into(),
            ));
        };
        Xids::parse(&xids).map_err(Failure::Retry)?;
        let until: Lsn = until.parse().map_err(Failure::Retry)?;
        let source = self.table.as_ref().expect("the source is known");
        let pg_columns: Vec<String> = simple(
            client,
            &format!(
                "SELECT attname FROM pg_attribute WHERE attrelid = {} AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                source.oid
            ),
        )?
        .into_iter()
        .map(|r| r.into_iter().next().flatten().unwrap_or_default())
        .collect();
        let list: Vec<String> = pg_columns.iter().map(|c| quoted(c)).collect();
        simple(
            client,
            &format!(
                "DECLARE eddy_snapshot NO SCROLL CURSOR FOR SELECT {} FROM {}",
                list.join(", "),
                table_sql(&self.config.source_table)
            ),
        )?;
        let at = CdcPosition {
            slot: Some(self.slot.clone()),
            after: start,
            snapshot: Some(Snapshot { xids, until }),
        };
        let place = format!("{} (snapshot)", self.config.source_table);
        let position = serde_json::to_value(&at).expect("a position");
        if !self
            .target
            .read_cursor(client, "eddy_snapshot", &place, position)?
        {
            return Ok(());
        }
        self.at = at;
        self.read.clear();
        self.advanced = None;
        Ok(())
    }

    /// Moves the slot on to what the state holds for good.
    fn advance(&mut self, client: &Arc<Client>) -> Result<(), Failure> {
        let slot = literal(&self.slot);
        if self.advanced.is_none() {
            let found = simple(
                client,
                &format!("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = {slot}"),
            )?;
            let Some(row) = found.first() else {
                return Err(Failure::Retry(format!(
                    "replication slot '{}' does not exist: the changes after the checkpoint cannot be read (clear the pipeline's state and start it again)",
                    self.slot
                )));
            };
            let confirmed: Lsn = row
                .first()
                .cloned()
                .flatten()
                .unwrap_or_default()
                .parse()
                .map_err(Failure::Retry)?;
            if confirmed > self.at.after {
                return Err(Failure::Fatal(format!(
                    "replication slot '{}' has moved past the state's position ({confirmed} > {}): changes between are gone",
                    self.slot, self.at.after
                )));
            }
            self.advanced = Some(confirmed);
        }
        let target = if self.exactly_once {
            self.target
                .feeder
                .checkpointed_position(&self.target.spec.name)
                .and_then(|v| serde_json::from_value::<CdcPosition>(v).ok())
                .filter(|p| p.slot.as_deref() == Some(self.slot.as_str()))
                .map_or(Lsn::default(), |p| p.after)
        } else {
            self.at.after
        };
        if Some(target) > self.advanced {
            simple(
                client,
                &format!(
                    "SELECT pg_replication_slot_advance({slot}, {}::pg_lsn)",
                    literal(&target.to_string())
                ),
            )?;
            self.advanced = Some(target);
            while self.read.front().is_some_and(|(end, _)| *end <= target) {
                self.read.pop_front();
            }
        }
        Ok(())
    }

    /// Reads what the slot has past what was fed, and feeds it.
    fn stream(&mut self, client: &Arc<Client>) -> Result<bool, Failure> {
        let known: u64 = self.read.iter().map(|(_, n)| n).sum();
        // Read up to the WAL written now: when all of it comes back, every
        // transaction that committed before it has been seen, the source's
        // or not, and the position may move past it (else a source table
        // that is idle would hold the slot, and its WAL, where it is).
        let upto: Lsn = simple(client, "SELECT pg_current_wal_lsn()::text")?
            .first()
            .and_then(|r| r.first().cloned().flatten())
            .ok_or_else(|| Failure::Retry("the WAL position was not given".into()))?
            .parse()
            .map_err(Failure::Retry)?;
        let limit = known + BATCH;
        let sql = format!(
            "SELECT data FROM pg_logical_slot_peek_binary_changes({}, {}::pg_lsn, {limit}, 'proto_version', '1', 'publication_names', {})",
            literal(&self.slot),
            literal(&upto.to_string()),
            literal(&quoted(&self.config.publication)),
        );
        let c = Arc::clone(client);
        let rows = block_on(async move { c.query(&sql, &[]).await })?;
        let oid = self.table.as_ref().expect("the source is known").oid;
        let snapshot = match &self.at.snapshot {
            Some(s) => Some((Xids::parse(&s.xids).map_err(Failure::Fatal)?, s.until)),
            None => None,
        };
        let mut text = String::new();
        // The transaction being read: its commit's LSN and whether it is
        // applied; the messages since the last commit.
        let mut current: Option<(Lsn, bool)> = None;
        let mut messages = 0u64;
        let mut moved = false;
        for row in &rows {
            messages += 1;
            let data: &[u8] = row.get(0);
            let message = pgoutput::decode(data).map_err(Failure::Fatal)?;
            let applied = current.is_some_and(|(_, a)| a);
            let at = current.map_or(self.at.after, |(l, _)| l);
            match message {
                Message::Begin { final_lsn, xid } => {
                    let old = final_lsn < self.at.after;
                    let in_snapshot = snapshot
                        .as_ref()
                        .is_some_and(|(x, until)| final_lsn < *until && x.sees(xid));
                    current = Some((final_lsn, !old && !in_snapshot));
                }
                Message::Commit { end_lsn, .. } => {
                    if current.is_some_and(|(l, _)| l >= self.at.after) {
                        self.read.push_back((end_lsn, messages));
                        self.at.after = end_lsn;
                        moved = true;
                    }
                    messages = 0;
                    current = None;
                }
                // The table's columns as of here in the log.
                Message::Relation(r) if r.id == oid => {
                    self.target
                        .match_columns(&r.columns)
                        .map_err(Failure::Fatal)?;
                }
                Message::Insert { relation, new } if relation == oid && applied => {
                    match self.target.row(&new, None) {
                        Ok(r) => push(&mut text, "insert", r),
                        Err(e) => self.reject(at, &e),
                    }
                }
                Message::Update {
                    relation,
                    old,
                    key_only,
                    new,
                } if relation == oid && applied => match old.filter(|_| !key_only) {
                    None => self.reject(
                        at,
                        "an update without its old row (the table needs REPLICA IDENTITY FULL)",
                    ),
                    Some(old) => match (
                        self.target.row(&old, None),
                        self.target.row(&new, Some(&old)),
                    ) {
                        (Ok(o), Ok(n)) => {
                            push(&mut text, "delete", o);
                            push(&mut text, "insert", n);
                        }
                        (Err(e), _) | (_, Err(e)) => self.reject(at, &e),
                    },
                },
                Message::Delete {
                    relation,
                    old,
                    key_only,
                } if relation == oid && applied => {
                    if key_only {
                        self.reject(
                            at,
                            "a delete without its old row (the table needs REPLICA IDENTITY FULL)",
                        );
                    } else {
                        match self.target.row(&old, None) {
                            Ok(o) => push(&mut text, "delete", o),
                            Err(e) => self.reject(at, &e),
                        }
                    }
                }
                Message::Truncate { relations } if relations.contains(&oid) && applied => {
                    return Err(Failure::Fatal(format!(
                        "'{}' was truncated at LSN {at}, which cannot be followed row by row (publish without truncate: WITH (publish = 'insert, update, delete')); clear the pipeline's state and start it again",
                        self.config.source_table
                    )));
                }
                _ => {}
            }
        }
        let complete = (rows.len() as u64) < limit;
        if complete && upto > self.at.after {
            self.at.after = upto;
            // Recorded now and then: a step each poll would be for nothing.
            moved = moved || self.last_fed.elapsed() >= IDLE_POSITION;
        }
        if let Some(s) = &self.at.snapshot {
            if self.at.after >= s.until {
                self.at.snapshot = None;
            }
        }
        if !moved {
            return Ok(false);
        }
        self.last_fed = std::time::Instant::now();
        let fed_rows = !text.is_empty();
        let position = serde_json::to_value(&self.at).expect("a position");
        let place = format!(
            "{} (changes up to LSN {})",
            self.config.source_table, self.at.after
        );
        self.target
            .feed(text, Origin::at(&self.target.spec.name, position), &place);
        Ok(fed_rows)
    }
}

/// Appends a change as a JSON line.
fn push(text: &mut String, op: &str, row: Value) {
    let mut change = Map::new();
    change.insert(op.to_string(), row);
    text.push_str(&Value::Object(change).to_string());
    text.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_sees_what_committed_before_it() {
        let x = Xids::parse("100:105:101,103").unwrap();
        assert!(x.sees(99));
        assert!(x.sees(100));
        assert!(!x.sees(101));
        assert!(x.sees(102));
        assert!(!x.sees(103));
        assert!(!x.sees(105));
        assert!(!x.sees(1000));
        assert!(Xids::parse("100:105:").unwrap().sees(104));
        assert!(Xids::parse("1:2").is_err());
        // 64-bit ids past a wraparound: the stream's 32-bit id is near.
        let epoch = 3u64 << 32;
        let x = Xids::parse(&format!("{}:{}:", epoch - 10, epoch + 5)).unwrap();
        assert!(x.sees(u32::MAX - 2));
        assert!(x.sees(2));
        assert!(!x.sees(7));
    }

    #[test]
    fn slots_are_named_for_their_pipeline_and_connector() {
        let a = slot_name("p", "orders.postgres_cdc_input-0");
        assert_eq!(a, slot_name("p", "orders.postgres_cdc_input-0"));
        assert_ne!(a, slot_name("q", "orders.postgres_cdc_input-0"));
        assert!(a.len() <= 63 && a.starts_with("eddy_"));
    }

    #[test]
    fn positions_read_back() {
        let p = CdcPosition {
            slot: Some("eddy_1".into()),
            after: Lsn(0x1_0000_0010),
            snapshot: Some(Snapshot {
                xids: "5:9:7".into(),
                until: Lsn(3),
            }),
        };
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["after"], "1/10");
        assert_eq!(serde_json::from_value::<CdcPosition>(v).unwrap(), p);
        assert_eq!(
            position::<CdcPosition>(Some(&serde_json::json!({}))).unwrap(),
            CdcPosition::default()
        );
    }
}
