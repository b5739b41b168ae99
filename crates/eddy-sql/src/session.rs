//! The DataFusion session states that Eddy plans with.
//!
//! A state supplies the function registry (with DataFusion's functions
//! whose results can outgrow their arguments replaced by [`bounded`] ones),
//! the configuration (identifiers are case-insensitive unless quoted;
//! strings are `Utf8`) and the analyzer and optimizer rules. There are two,
//! built once per process and shared: one per set of type [`Rules`], which
//! differ only in the few functions whose types or answers the rules decide.

use std::sync::{Arc, OnceLock};

use datafusion::execution::registry::FunctionRegistry;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::planner::ExprPlanner;
use datafusion::optimizer::AnalyzerRule;
use datafusion::prelude::SessionConfig;
use datafusion::sql::planner::ParserOptions;

use crate::bounded;

/// The zone of `TIMESTAMP WITH TIME ZONE` values: they are instants,
/// written in UTC.
pub const UTC: &str = "+00:00";

/// The shared session state: PostgreSQL's type rules (see [`planning`]).
pub fn state() -> &'static SessionState {
    static STATE: OnceLock<SessionState> = OnceLock::new();
    STATE.get_or_init(|| {
        let mut config = SessionConfig::new().with_target_partitions(1);
        let options = config.options_mut();
        options.sql_parser.map_string_types_to_utf8view = false;
        options.sql_parser.enable_ident_normalization = true;
        options.sql_parser.collect_spans = true;
        // `TIMESTAMP WITH TIME ZONE` is an instant, kept in UTC (Feldera's
        // types.md): Arrow's timestamp with the zone `+00:00`.
        options.execution.time_zone = Some(UTC.to_string());
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .build();
        // Indexing a VARIANT, and SUBSTRING, POSITION and OVERLAY over
        // bytes, are planned before DataFusion's planners try.
        let forms = Arc::new(crate::binary::Forms::new(&state));
        let mut state = planners_first(state, vec![Arc::new(crate::variant::Indexing), forms]);
        let mut own = crate::windows::functions();
        own.push(crate::asof::marker());
        own.push(crate::functions::now());
        own.push(crate::nanos::function());
        own.extend(crate::variant::functions());
        own.extend(crate::interval::functions::all());
        own.extend(crate::udfs::functions());
        own.extend(crate::timefns::functions());
        own.extend(crate::period::functions());
        own.push(crate::arrayinsert::function());
        own.extend(crate::uuid::functions());
        own.extend(crate::binary::functions(&state));
        for f in own.iter().chain(bounded::functions()) {
            state
                .register_udf(Arc::clone(f))
                .expect("registering a function of the default registry");
        }
        for f in crate::aggregates::functions(&state)
            .into_iter()
            .chain(crate::stats::functions(Rules::Postgres))
        {
            state
                .register_udaf(f)
                .expect("registering an aggregate of the default registry");
        }
        state.add_analyzer_rule(Arc::new(crate::castcheck::RefuseImpossibleCasts));
        state.add_analyzer_rule(Arc::new(crate::uuid::UuidCasts));
        state.add_analyzer_rule(Arc::new(crate::rowcast::ByPosition));
        state.add_analyzer_rule(Arc::new(crate::ordered::OrderedNested));
        // Array functions read a ROW beside an array of ROWs by position;
        // COALESCE and its kind a BINARY(n) beside a VARBINARY as one.
        let wrapped: Vec<_> = crate::rowargs::functions(&state)
            .into_iter()
            .chain(crate::sametype::functions(&state, false))
            .collect();
        for f in wrapped {
            state
                .register_udf(f)
                .expect("registering a function of the default registry");
        }
        for f in crate::sessions::functions() {
            state
                .register_udwf(f)
                .expect("registering a window function of the default registry");
        }
        // A UUID compared with a string, or read by a string function, is
        // resolved before DataFusion's type coercion, which has no common
        // type for them; arguments that must share a type and cannot are
        // refused before it, in Feldera's words.
        let mut rules: Vec<Arc<dyn AnalyzerRule + Send + Sync>> = vec![
            Arc::new(crate::uuid::Implicit),
            Arc::new(crate::sametype::SameTypeArguments),
            Arc::new(crate::sametype::SetOperationColumns),
        ];
        rules.extend(state.analyzer().rules.iter().cloned());
        // `ARRAY[…]` is planned with the wrapped `make_array`.
        let array = Arc::new(crate::sametype::ArrayLiteral(
            state.udf("make_array").expect("make_array is registered"),
        ));
        let state = planners_first(state, vec![array]);
        SessionStateBuilder::new_from_existing(state)
            .with_analyzer_rules(rules)
            .build()
    })
}

/// `state` with `first` tried before its own expression planners.
fn planners_first(state: SessionState, first: Vec<Arc<dyn ExprPlanner>>) -> SessionState {
    let planners = first
        .into_iter()
        .chain(state.expr_planners().iter().cloned())
        .collect();
    SessionStateBuilder::new_from_existing(state)
        .with_expr_planners(planners)
        .build()
}

/// Whose type rules a program is planned with, where Feldera's and
/// PostgreSQL's differ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Rules {
    /// Feldera's (the default: Eddy runs Feldera's programs): `AVG`,
    /// `STDDEV_*` and `VAR_*` of an integer or DECIMAL argument have the
    /// argument's type (see [`crate::stats`]); `ARRAY_AGG` over no rows is
    /// an empty array, and `ARRAY_AGG(DISTINCT …)` is sorted (see
    /// [`crate::array_agg`]); `ROW(…)` names its fields `EXPR$0`, … (see
    /// [`crate::row`]); BOOLEAN, TIMESTAMP and binary values cast to
    /// strings are written as Feldera writes them (see [`crate::tostring`]);
    /// a REAL compared with an exact number is compared as a REAL (see
    /// [`crate::realcompare`]); functions PostgreSQL defines otherwise
    /// (`LOG`, `CONCAT`, `GREATEST`, `REGEXP_REPLACE`, …) have Feldera's
    /// meaning (see [`crate::functions`]) and NULL sorts as the smallest
    /// value (see [`crate::nullorder`]).
    #[default]
    Feldera,
    /// PostgreSQL's (DataFusion's): those aggregates are DOUBLE (DECIMAL
    /// with more digits for a DECIMAL `AVG`), and `ARRAY_AGG` over no rows
    /// is NULL; `ROW(…)` names its fields `c0`, …. The SQLite corpus and
    /// the tests whose oracle is DataFusion plan so.
    Postgres,
}

/// The state that plans a program under `rules`.
pub fn planning(rules: Rules) -> &'static SessionState {
    static FELDERA: OnceLock<SessionState> = OnceLock::new();
    match rules {
        Rules::Postgres => state(),
        Rules::Feldera => FELDERA.get_or_init(|| {
            // Feldera's string functions read any scalar's text
            // ([`crate::textargs`]), its numeric functions a string's
            // number ([`crate::numargs`]); interval arithmetic, and SUBSTRING
            // and POSITION over those functions, are planned before any
            // other planner tries (see [`crate::interval::plan`]).
            let mut state = state().clone();
            let wrapped: Vec<_> = crate::textargs::functions(&state)
                .into_iter()
                .chain(crate::numargs::functions(&state))
                .chain(crate::sametype::functions(&state, true))
                .collect();
            for f in wrapped {
                state
                    .register_udf(f)
                    .expect("registering a function of the default registry");
            }
            let forms = Arc::new(crate::binary::Forms::new(&state));
            let array = Arc::new(crate::sametype::ArrayLiteral(
                state.udf("make_array").expect("make_array is registered"),
            ));
            let mut state = planners_first(
                state,
                vec![Arc::new(crate::interval::plan::Arithmetic), forms, array],
            );
            let feldera = crate::stats::functions(Rules::Feldera)
                .into_iter()
                .chain([crate::array_agg::function()]);
            for f in feldera {
                state
                    .register_udaf(f)
                    .expect("registering an aggregate of the default registry");
            }
            state
                .register_udf(crate::row::function())
                .expect("registering a function of the default registry");
            state.add_analyzer_rule(Arc::new(crate::rowcompare::RefuseRowEquality));
            state.add_analyzer_rule(Arc::new(crate::interval::plan::Casts));
            state.add_analyzer_rule(Arc::new(crate::timecasts::TimeCasts));
            state.add_analyzer_rule(Arc::new(crate::tostring::FelderaStrings));
            state.add_analyzer_rule(Arc::new(crate::realcompare::RealComparisons));
            state
        }),
    }
}

/// Parser options matching [`state`].
pub fn parser_options() -> ParserOptions {
    ParserOptions::from(&state().config_options().sql_parser)
}
