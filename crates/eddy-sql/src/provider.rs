//! The catalog as DataFusion's SQL planner sees it: the program's tables and
//! views by name, and DataFusion's function library.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::{plan_err, Result, TableReference};
use datafusion::config::ConfigOptions;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::logical_plan::builder::LogicalTableSource;
use datafusion::logical_expr::planner::{ContextProvider, ExprPlanner, TypePlanner};
use datafusion::logical_expr::{AggregateUDF, HigherOrderUDF, ScalarUDF, TableSource, WindowUDF};

use crate::types::{Planner, Types};

/// Relations visible to a query: normalized name to schema.
pub struct Provider<'a> {
    state: &'a SessionState,
    relations: &'a HashMap<String, SchemaRef>,
    /// Feldera's types, with the program's own.
    types: Arc<dyn TypePlanner>,
}

impl<'a> Provider<'a> {
    /// A provider over `relations`, with `state`'s functions and Feldera's
    /// types (no user-defined one).
    pub fn new(state: &'a SessionState, relations: &'a HashMap<String, SchemaRef>) -> Self {
        Self {
            state,
            relations,
            types: Arc::new(Planner(Arc::default())),
        }
    }

    /// The same provider, with a program's user-defined types.
    pub fn with_types(mut self, types: Arc<Types>) -> Self {
        self.types = Arc::new(Planner(types));
        self
    }
}

impl ContextProvider for Provider<'_> {
    fn get_table_source(&self, name: TableReference) -> Result<Arc<dyn TableSource>> {
        match self.relations.get(name.table()) {
            Some(schema) => Ok(Arc::new(LogicalTableSource::new(Arc::clone(schema)))),
            None => plan_err!("table or view '{}' not found", name.table()),
        }
    }

    fn create_cte_work_table(
        &self,
        _name: &str,
        schema: SchemaRef,
    ) -> Result<Arc<dyn TableSource>> {
        Ok(Arc::new(LogicalTableSource::new(schema)))
    }

    fn get_expr_planners(&self) -> &[Arc<dyn ExprPlanner>] {
        self.state.expr_planners()
    }

    fn get_type_planner(&self) -> Option<Arc<dyn TypePlanner>> {
        Some(Arc::clone(&self.types))
    }

    fn get_function_meta(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        self.state.scalar_functions().get(name).cloned()
    }

    fn get_higher_order_meta(&self, name: &str) -> Option<Arc<HigherOrderUDF>> {
        self.state.higher_order_functions().get(name).cloned()
    }

    fn get_aggregate_meta(&self, name: &str) -> Option<Arc<AggregateUDF>> {
        self.state.aggregate_functions().get(name).cloned()
    }

    fn get_window_meta(&self, name: &str) -> Option<Arc<WindowUDF>> {
        self.state.window_functions().get(name).cloned()
    }

    fn get_variable_type(&self, _variable_names: &[String]) -> Option<DataType> {
        None
    }

    fn options(&self) -> &ConfigOptions {
        self.state.config_options()
    }

    // The names are sorted so that a "Did you mean" among equally close
    // names is the same on every run (the registries are hash maps).
    fn udf_names(&self) -> Vec<String> {
        sorted(self.state.scalar_functions().keys())
    }

    fn higher_order_function_names(&self) -> Vec<String> {
        sorted(self.state.higher_order_functions().keys())
    }

    fn udaf_names(&self) -> Vec<String> {
        sorted(self.state.aggregate_functions().keys())
    }

    fn udwf_names(&self) -> Vec<String> {
        sorted(self.state.window_functions().keys())
    }
}

/// A registry's names in order.
fn sorted<'a>(names: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut names: Vec<String> = names.cloned().collect();
    names.sort();
    names
}
