//! Circuit operators, one per module. Each module's doc comment states the
//! operator's incremental rule: how a change of its inputs becomes a change
//! of its output.

pub mod aggregate;
pub mod constant;
pub mod delay;
pub mod differentiate;
pub mod distinct;
pub mod filter;
pub mod input;
pub mod integrate;
pub mod join;
pub mod linear;
pub mod map;
pub mod negate;
pub mod plus;
pub mod topk;
pub mod upsert;

use crate::{Result, ZSet};

/// One node's computation: its inputs' changes of a step to its own change.
pub trait Operator: Send {
    /// A short name for plans and errors.
    fn name(&self) -> &str;

    /// Computes this step's output change from this step's input changes.
    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet>;

    /// Whether empty input changes always give an empty output change, so
    /// the scheduler may skip the call. True for every operator whose output
    /// depends only on input changes; false for sources and delays.
    fn quiet_on_empty(&self) -> bool {
        true
    }
}

pub use aggregate::Aggregate;
pub use constant::Constant;
pub use delay::Delay;
pub use differentiate::Differentiate;
pub use distinct::Distinct;
pub use filter::Filter;
pub use integrate::Integrate;
pub use join::Join;
pub use map::Map;
pub use negate::Negate;
pub use plus::Plus;
pub use topk::TopK;
pub use upsert::Upsert;
