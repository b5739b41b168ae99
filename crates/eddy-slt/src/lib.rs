//! A sqllogictest runner for Eddy.
//!
//! Every `query` becomes a view in a pipeline over the tables declared before
//! it. The tables' contents are fed in at least three steps, in a seeded
//! random split that also deletes and re-inserts some rows, so that every
//! answer exercises incremental maintenance; the answer checked is the view's
//! integrated contents after the last step, as Eddy's circuit computed them.
//!
//! Statements: `CREATE TABLE` and `CREATE VIEW` extend the program; `INSERT`,
//! `DELETE` and `UPDATE` change the tables (their row sets are computed by
//! Eddy pipelines too); `DROP TABLE`/`DROP VIEW` remove definitions;
//! indexes and triggers are names only (Eddy has neither) and transactions
//! are accepted as no-ops.
//!
//! A failure that a documented difference between PostgreSQL's semantics
//! (Eddy's) and SQLite's (the corpus's answers) explains is counted apart
//! ([`differences`]).
//!
//! `skipif`/`onlyif` follow a PostgreSQL-like engine: records marked
//! `onlyif X` run only for X = `postgresql` or `eddy`; records marked
//! `skipif postgresql` or `skipif eddy` are skipped.

pub mod differences;
pub mod format;
pub mod runner;
pub mod statements;

pub use runner::{run_file, run_file_restarting, run_file_with, run_script, Failure, FileReport};
pub use statements::Database;
