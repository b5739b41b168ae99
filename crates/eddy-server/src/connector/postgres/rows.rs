//! PostgreSQL's rows into a table, for the inputs (`postgres_cdc_input`,
//! `postgres_input`): columns matched by name, values read from their
//! text ([`super::text`]) into the JSON changes the table's reader takes,
//! rows that do not read reported, and a query read whole through a
//! cursor while checkpoints wait.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use eddy_io::format::InputFormat;
use eddy_io::json::UpdateFormat;
use serde_json::{Map, Value};
use tokio_postgres::{Client, SimpleQueryMessage};

use super::pgoutput::Datum;
use crate::connector::blocking::block_on;
use crate::connector::rounds::Failure;
use crate::connector::{feed_piece, ConnectorSpec};
use crate::input::Piece;
use crate::runner::{Feeder, Origin};
use crate::stats::EndpointStats;

/// Rows of a query fetched at once.
const FETCH: usize = 10_000;

/// Runs SQL (no parameters) and returns its rows' text values.
pub fn simple(client: &Arc<Client>, sql: &str) -> Result<Vec<Vec<Option<String>>>, Failure> {
    let (c, sql) = (Arc::clone(client), sql.to_string());
    let messages = block_on(async move { c.simple_query(&sql).await })?;
    Ok(messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect())
}

/// A string as an SQL literal.
pub fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Values are read as text, and text depends on the session's settings (a
/// role's or server's own could write dates day first): these fix them.
pub const SESSION: &str = "SET DateStyle = ISO; SET IntervalStyle = postgres; \
     SET bytea_output = hex; SET TimeZone = 'UTC'; SET extra_float_digits = 3";

/// The table rows go into.
pub struct Target {
    /// The connector.
    pub spec: ConnectorSpec,
    /// The pipeline's input.
    pub feeder: Arc<Feeder>,
    /// The connector's counters.
    pub stats: Arc<EndpointStats>,
    schema: SchemaRef,
    /// Per column of the table: its place and type OID in PostgreSQL's
    /// rows (`None`: PostgreSQL has no such column; it is NULL).
    columns: Vec<Option<(usize, u32)>>,
    /// Where rows come from, in messages (a table's name, "the query").
    source: String,
}

impl Target {
    /// The table of `spec`, fed rows from `source`.
    pub fn new(
        spec: &ConnectorSpec,
        feeder: &Arc<Feeder>,
        stats: Arc<EndpointStats>,
        source: &str,
    ) -> Result<Self, String> {
        let schema = feeder
            .schema(&spec.relation)
            .map_err(|e| e.to_string())?
            .clone();
        Ok(Self {
            spec: spec.clone(),
            feeder: Arc::clone(feeder),
            stats,
            schema,
            columns: Vec::new(),
            source: source.to_string(),
        })
    }

    /// Matches the table's columns with PostgreSQL's (name, type OID), by
    /// name: each NOT NULL column must be there; PostgreSQL's others are
    /// not read.
    pub fn match_columns(&mut self, columns: &[(String, u32)]) -> Result<(), String> {
        self.columns = self
            .schema
            .fields()
            .iter()
            .map(|f| {
                let found = columns
                    .iter()
                    .position(|(n, _)| n.eq_ignore_ascii_case(f.name()))
                    .map(|i| (i, columns[i].1));
                if found.is_none() && !f.is_nullable() {
                    return Err(format!(
                        "column '{}' is NOT NULL but {} has no such column",
                        f.name(),
                        self.source
                    ));
                }
                Ok(found)
            })
            .collect::<Result<_, _>>()?;
        Ok(())
    }

    /// A row of PostgreSQL's (its values in its column order) as a JSON
    /// object of the table's columns; an unchanged TOASTed value is taken
    /// from `old`.
    pub fn row(&self, values: &[Datum], old: Option<&[Datum]>) -> Result<Value, String> {
        let mut out = Map::new();
        for (field, place) in self.schema.fields().iter().zip(&self.columns) {
            let Some((i, pg_type)) = *place else {
                continue;
            };
            let mut datum = values
                .get(i)
                .ok_or("a row with fewer columns than its table")?;
            if *datum == Datum::Unchanged {
                datum = old
                    .and_then(|o| o.get(i))
                    .filter(|d| **d != Datum::Unchanged)
                    .ok_or_else(|| {
                        format!("column '{}' was left unchanged and not sent", field.name())
                    })?;
            }
            let value = match datum {
                Datum::Text(t) => super::text::to_json(t, pg_type, field.data_type())
                    .map_err(|e| format!("column '{}': {e}", field.name()))?,
                _ => Value::Null,
            };
            out.insert(field.name().clone(), value);
        }
        Ok(Value::Object(out))
    }

    /// Counts and reports a row that could not be read, `at` a place.
    pub fn reject(&self, at: &str, e: &str) {
        (self.stats).rejected(1, &format!("{} {at}: {e}", self.source));
    }

    /// Feeds JSON changes, one per line; false once the pipeline stops.
    pub fn feed(&self, text: String, origin: Origin, place: &str) -> bool {
        let format = InputFormat::json_lines(UpdateFormat::InsertDelete);
        let piece = Piece {
            bytes: text.len(),
            text,
            raw: None,
            first_line: 1,
            errors: Vec::new(),
        };
        feed_piece(
            &self.spec,
            &format,
            piece,
            &self.feeder,
            &self.stats,
            origin,
            Some(place),
        )
    }

    /// Inserts the rows of `cursor` (open in the client's transaction), a
    /// piece at a time. They enter the state whole: checkpoints wait until
    /// the last piece, which carries `position`, is in it. A read that
    /// fails after some rows were fed cannot be taken again (the state
    /// holds part of the rows): it is fatal, and checkpoints keep waiting,
    /// so none holds the part. False if the pipeline stopped first.
    pub fn read_cursor(
        &self,
        client: &Arc<Client>,
        cursor: &str,
        place: &str,
        position: Value,
    ) -> Result<bool, Failure> {
        let name = self.spec.name.clone();
        self.feeder.hold(&name);
        let mut waiting: Option<(String, usize)> = None;
        let (mut rows_fed, mut fetched) = (0usize, 0usize);
        loop {
            let rows = match simple(client, &format!("FETCH {FETCH} FROM {cursor}")) {
                Ok(rows) => rows,
                Err(Failure::Retry(e) | Failure::Fatal(e)) if rows_fed > 0 => {
                    return Err(Failure::Fatal(format!(
                        "reading {} broke off after {rows_fed} rows ({e}): clear the pipeline's state and start it again",
                        self.source
                    )))
                }
                Err(e) => {
                    self.feeder.release(&name);
                    return Err(e);
                }
            };
            if rows.is_empty() {
                break;
            }
            let mut text = String::new();
            for (i, values) in rows.iter().enumerate() {
                let values: Vec<Datum> = values
                    .iter()
                    .map(|v| v.as_ref().map_or(Datum::Null, |t| Datum::Text(t.clone())))
                    .collect();
                match self.row(&values, None) {
                    Ok(row) => {
                        text.push_str(&serde_json::json!({ "insert": row }).to_string());
                        text.push('\n');
                    }
                    Err(e) => self.reject(&format!("(row {})", fetched + i + 1), &e),
                }
            }
            fetched += rows.len();
            // A piece goes once the next is read: the last carries the
            // position and the release.
            if let Some((previous, n)) = waiting.replace((text, rows.len())) {
                if !self.feed(previous, Origin::default(), place) {
                    return Ok(false);
                }
                rows_fed += n;
            }
        }
        let feeder = Arc::clone(&self.feeder);
        let origin = Origin {
            position: Some((Arc::from(name.as_str()), position)),
            on_processed: Some(Box::new(move || feeder.release(&name))),
            ..Origin::default()
        };
        Ok(self.feed(waiting.unwrap_or_default().0, origin, place))
    }
}
