//! `eddy-sql`: Eddy's SQL front end.
//!
//! A *program* is a sequence of `CREATE TABLE` and `CREATE [MATERIALIZED]
//! VIEW` statements. [`Program::parse`] checks it: tables become input
//! streams, and each view's query is planned by DataFusion against a catalog
//! of the program's tables and earlier views, optimized with DataFusion's
//! meaning-preserving rules, freed of the correlated subqueries that
//! DataFusion leaves in place ([`decorrelate`]), and lowered onto an
//! `eddy-dbsp` circuit ([`lower`]). A [`Pipeline`] runs that circuit: changes
//! pushed into tables come out as changes of every view.

pub mod adhoc;
pub mod aggregates;
pub mod array_agg;
pub mod arrayinsert;
pub mod asof;
pub mod binary;
pub mod bounded;
pub mod castcheck;
pub mod catalog;
pub mod decorrelate;
pub mod dialect;
pub mod error;
pub mod functions;
pub mod guard;
pub mod index;
pub mod interval;
pub mod limits;
pub mod locate;
pub mod lower;
pub mod names;
pub mod nanos;
pub mod nullif;
pub mod nullorder;
pub mod numargs;
pub mod ordered;
pub mod parse;
pub mod period;
pub mod pipeline;
pub mod program;
pub mod provider;
pub mod realcompare;
pub mod row;
pub mod rowargs;
pub mod rowcast;
pub mod rowcompare;
pub mod sametype;
pub mod session;
pub mod sessions;
pub mod setops;
pub mod stats;
pub mod textargs;
pub mod timecasts;
pub mod timefns;
pub mod tostring;
pub mod tvf;
pub mod types;
pub mod udfs;
pub mod unnest;
pub mod uuid;
pub mod variant;
pub mod windows;
mod wording;

pub use catalog::{TableDef, ViewDef};
pub use error::{SqlError, SqlResult};
pub use pipeline::{Pipeline, PipelineOptions, RowErrors, ViewsKept};
pub use program::Program;
pub use session::Rules;
