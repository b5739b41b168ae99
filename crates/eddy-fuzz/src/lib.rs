//! `eddy-fuzz`: random and mutated input for the doors through which
//! untrusted bytes reach Eddy, each checked for panics, stack overflows and
//! hangs.
//!
//! ```text
//!  seeds (sql-tests/*.slt, and the sqllogictest corpus when given)
//!    │  token mutations, splices, deep nesting, extreme literals
//!    ▼
//!  program text ──► Program::parse ─► connectors ─► Pipeline::new ─► steps
//!  query text   ──► eddy_server::query::run (read-only, limited)
//!  change bytes ──► Chunker ─► parse_piece (JSON formats, CSV)
//! ```
//!
//! Each target is a test in `tests/`: `cargo test` runs each for a few
//! seconds with a fixed seed; `EDDY_FUZZ_SECONDS=3600 cargo test --release
//! -p eddy-fuzz --test program -- --nocapture` runs one for an hour (see
//! [`runner`] for the settings). Coverage-guided fuzzing (`cargo fuzz`)
//! needs a nightly toolchain, which these machines cannot install, so the
//! generators here aim where coverage would lead: every seed of the SQL
//! tests, mutated, and structure-aware change input.

pub mod changes;
pub mod runner;
pub mod seeds;
pub mod sql;
pub mod values;
