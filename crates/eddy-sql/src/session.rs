//! The one DataFusion session state that Eddy plans with.
//!
//! It supplies the function registry, the configuration (identifiers are
//! case-insensitive unless quoted; strings are `Utf8`) and the analyzer and
//! optimizer rules. It is built once per process and shared.

use std::sync::OnceLock;

use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::prelude::SessionConfig;
use datafusion::sql::planner::ParserOptions;

/// The shared session state.
pub fn state() -> &'static SessionState {
    static STATE: OnceLock<SessionState> = OnceLock::new();
    STATE.get_or_init(|| {
        let mut config = SessionConfig::new().with_target_partitions(1);
        let options = config.options_mut();
        options.sql_parser.map_string_types_to_utf8view = false;
        options.sql_parser.enable_ident_normalization = true;
        options.sql_parser.collect_spans = true;
        SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .build()
    })
}

/// Parser options matching [`state`].
pub fn parser_options() -> ParserOptions {
    ParserOptions::from(&state().config_options().sql_parser)
}
