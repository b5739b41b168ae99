//! `eddy-dbsp`: Eddy's incremental engine.
//!
//! This crate knows nothing about SQL. It provides
//!
//! * [`ZSet`]: a change batch, an Arrow [`RecordBatch`](datafusion::arrow::array::RecordBatch)
//!   plus one `i64` weight per row (+1 insert, −1 delete);
//! * [`RowCodec`]: memcomparable row encodings (Arrow's row format) used as
//!   keys of indexed state;
//! * [`Trace`]: the indexed, integrated contents of a stream, kept by the
//!   stateful operators;
//! * [`Circuit`]: a dataflow graph of [`operator`]s evaluated once per step in
//!   a fixed topological order, fed by [`InputHandle`]s.
//!
//! The theory is DBSP (Budiu et al., VLDB 2023): every operator maps a stream
//! of changes to a stream of changes, and each operator module states its
//! incremental rule in its doc comment.

pub mod checkpoint;
pub mod circuit;
pub mod error;
pub mod maps;
pub mod operator;
pub mod profile;
pub mod row;
pub mod row_errors;
pub mod storage;
pub mod trace;
pub mod zset;

pub use circuit::{Circuit, InputHandle, NodeId, OperatorState};
pub use error::{Error, Result};
pub use profile::{NodeInfo, NodeProfile};
pub use row::RowCodec;
pub use storage::{Storage, StorageStats};
pub use trace::Trace;
pub use zset::ZSet;
