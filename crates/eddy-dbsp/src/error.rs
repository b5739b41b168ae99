//! Errors of the engine.

use datafusion::arrow::error::ArrowError;
use datafusion::error::DataFusionError;

/// An error raised while building or stepping a circuit.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An Arrow kernel failed (a cast, a concatenation, a row conversion).
    #[error("arrow: {0}")]
    Arrow(#[from] ArrowError),
    /// A DataFusion expression or aggregate failed while evaluating a batch.
    #[error("{0}")]
    DataFusion(#[from] DataFusionError),
    /// The circuit was wired or fed inconsistently.
    #[error("circuit: {0}")]
    Circuit(String),
    /// A storage file could not be written or read back (the message
    /// names the file).
    #[error("storage: {0}")]
    Storage(String),
}

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
