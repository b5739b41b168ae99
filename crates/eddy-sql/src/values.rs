//! Constant rows.
