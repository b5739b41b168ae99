//! Feldera's types that DataFusion's SQL planner does not know, planned
//! for it (a DataFusion [`TypePlanner`], so they are understood wherever a
//! type is written: columns, `CAST`, function parameters):
//!
//! * user-defined structure types (`CREATE TYPE name AS (field type, …)`),
//!   Arrow structs, which may nest and be used in arrays and maps;
//! * `MAP<K, V>`, an Arrow map (keys not NULL, values nullable, unsorted);
//! * `VARBINARY` and `BINARY(n)`, Arrow binary;
//! * `UUID`, as its 16 bytes (`eddy_io::uuid`);
//! * `VARIANT`, as the bytes of `eddy_io::variant` (see [`crate::variant`]).
//!
//! `T ARRAY` and `ROW(…)` reach the planner as `T[]` and `STRUCT<…>`
//! (see [`crate::dialect`]), which DataFusion plans itself.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion::common::{plan_err, Result};
use datafusion::logical_expr::planner::TypePlanner;
use datafusion::sql::planner::SqlToRel;
use datafusion::sql::sqlparser::ast::{
    ColumnDef, DataType as SqlDataType, Ident, UserDefinedTypeCompositeAttributeDef,
};

use crate::program::normalize_ident;
use crate::provider::Provider;
use crate::session;

/// A program's user-defined types, by normalized name.
#[derive(Debug, Clone, Default)]
pub struct Types {
    by_name: HashMap<String, DataType>,
}

impl Types {
    /// Adds `CREATE TYPE name AS (attributes)`; `types` plans the fields'
    /// types, which may name types defined before.
    pub fn add(
        this: &mut Arc<Types>,
        name: &str,
        attributes: &[UserDefinedTypeCompositeAttributeDef],
    ) -> Result<()> {
        if this.by_name.contains_key(name) {
            return plan_err!("type '{name}' is already defined");
        }
        let mut fields = Vec::with_capacity(attributes.len());
        for a in attributes {
            let field = plan(this, &a.data_type)?;
            fields.push(
                field
                    .as_ref()
                    .clone()
                    .with_name(normalize_ident(&a.name))
                    .with_nullable(true),
            );
        }
        Arc::make_mut(this)
            .by_name
            .insert(name.to_string(), DataType::Struct(Fields::from(fields)));
        Ok(())
    }

    /// Whether no type is defined.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// Plans one SQL type with the program's types.
pub fn plan(types: &Arc<Types>, sql_type: &SqlDataType) -> Result<FieldRef> {
    let relations = HashMap::new();
    let provider = Provider::new(session::state(), &relations).with_types(Arc::clone(types));
    let planner = SqlToRel::new_with_options(&provider, session::parser_options());
    let schema = planner.build_schema(vec![ColumnDef {
        name: Ident::new("t"),
        data_type: sql_type.clone(),
        options: vec![],
    }])?;
    Ok(Arc::new(schema.field(0).clone()))
}

/// The [`TypePlanner`] of a program's types.
#[derive(Debug)]
pub struct Planner(pub Arc<Types>);

impl TypePlanner for Planner {
    fn plan_type_field(&self, sql_type: &SqlDataType) -> Result<Option<FieldRef>> {
        let data_type = match sql_type {
            SqlDataType::Custom(name, modifiers) if modifiers.is_empty() => {
                let Some(ident) = name.0.last().and_then(|p| p.as_ident()) else {
                    return Ok(None);
                };
                let name = normalize_ident(ident);
                match self.0.by_name.get(&name) {
                    Some(t) => t.clone(),
                    None if name == "variant" => eddy_io::variant::DATA_TYPE,
                    None => return Ok(None),
                }
            }
            SqlDataType::Map(key, value) => {
                let key = plan(&self.0, key)?;
                let value = plan(&self.0, value)?;
                let entries = Field::new(
                    "entries",
                    DataType::Struct(Fields::from(vec![
                        key.as_ref().clone().with_name("key").with_nullable(false),
                        value
                            .as_ref()
                            .clone()
                            .with_name("value")
                            .with_nullable(true),
                    ])),
                    false,
                );
                DataType::Map(Arc::new(entries), false)
            }
            SqlDataType::Varbinary(_) | SqlDataType::Binary(_) => DataType::Binary,
            // Its 16 bytes (see `eddy_io::uuid`).
            SqlDataType::Uuid => eddy_io::uuid::DATA_TYPE,
            _ => return Ok(None),
        };
        Ok(Some(Arc::new(Field::new("", data_type, true))))
    }
}
