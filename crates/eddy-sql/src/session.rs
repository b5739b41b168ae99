//! The one DataFusion session state that Eddy plans with.
//!
//! It supplies the function registry (with DataFusion's functions whose
//! results can outgrow their arguments replaced by [`bounded`] ones), the configuration (identifiers are
//! case-insensitive unless quoted; strings are `Utf8`) and the analyzer and
//! optimizer rules. It is built once per process and shared.

use std::sync::{Arc, OnceLock};

use datafusion::execution::registry::FunctionRegistry;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::prelude::SessionConfig;
use datafusion::sql::planner::ParserOptions;

use crate::bounded;

/// The shared session state.
pub fn state() -> &'static SessionState {
    static STATE: OnceLock<SessionState> = OnceLock::new();
    STATE.get_or_init(|| {
        let mut config = SessionConfig::new().with_target_partitions(1);
        let options = config.options_mut();
        options.sql_parser.map_string_types_to_utf8view = false;
        options.sql_parser.enable_ident_normalization = true;
        options.sql_parser.collect_spans = true;
        let mut state = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .build();
        let mut own = crate::windows::functions();
        own.push(crate::asof::marker());
        own.push(crate::functions::now());
        for f in own.iter().chain(bounded::functions()) {
            state
                .register_udf(Arc::clone(f))
                .expect("registering a function of the default registry");
        }
        for f in crate::aggregates::functions(&state) {
            state
                .register_udaf(f)
                .expect("registering an aggregate of the default registry");
        }
        for f in crate::sessions::functions() {
            state
                .register_udwf(f)
                .expect("registering a window function of the default registry");
        }
        state
    })
}

/// Parser options matching [`state`].
pub fn parser_options() -> ParserOptions {
    ParserOptions::from(&state().config_options().sql_parser)
}
