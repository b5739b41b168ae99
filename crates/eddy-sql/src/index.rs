//! `CREATE INDEX name ON view(columns)`, as Feldera reads it: not an index
//! of the engine, but the unique key of a view that keyed output
//! connectors (`"index": "name"`) write by, merging a key's delete and
//! insert of one step into one update. Its uniqueness is the user's
//! promise, as in Feldera; the index names a view defined before it and
//! columns of that view.

use datafusion::sql::sqlparser::ast::{CreateIndex, Expr};

use crate::catalog::ViewDef;
use crate::error::{SqlError, SqlResult};
use crate::program::normalize_ident;

/// A view's key, named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDef {
    /// The index's name.
    pub name: String,
    /// The view it keys.
    pub view: String,
    /// The key's columns, in order, as the view names them.
    pub columns: Vec<String>,
}

/// Reads a `CREATE INDEX` statement over one of `views`.
pub fn index_def(ci: &CreateIndex, views: &[ViewDef]) -> SqlResult<IndexDef> {
    let Some(name) = ci
        .name
        .as_ref()
        .and_then(|n| n.0.last()?.as_ident().cloned())
    else {
        return Err(SqlError::new(
            "CREATE INDEX needs a name: CREATE INDEX name ON view(columns)",
        ));
    };
    let name = normalize_ident(&name);
    if ci.unique || ci.using.is_some() || ci.predicate.is_some() || !ci.include.is_empty() {
        return Err(SqlError::new(format!(
            "CREATE INDEX {name}: only CREATE INDEX name ON view(columns) is read"
        )));
    }
    let Some(target) = ci.table_name.0.last().and_then(|p| p.as_ident()) else {
        return Err(SqlError::new(format!("CREATE INDEX {name}: no view named")));
    };
    let target = normalize_ident(target);
    let Some(view) = views.iter().find(|v| v.name == target) else {
        return Err(SqlError::new(format!(
            "CREATE INDEX {name} ON {target}: no view '{target}' is defined before it"
        )));
    };
    if ci.columns.is_empty() {
        return Err(SqlError::new(format!(
            "CREATE INDEX {name}: name the key's columns"
        )));
    }
    let mut columns = Vec::with_capacity(ci.columns.len());
    for c in &ci.columns {
        let Expr::Identifier(ident) = &c.column.expr else {
            return Err(SqlError::new(format!(
                "CREATE INDEX {name}: '{}' is not a column of {target}",
                c.column.expr
            )));
        };
        let column = normalize_ident(ident);
        let Some(field) = view
            .schema
            .fields()
            .iter()
            .find(|f| f.name().eq_ignore_ascii_case(&column))
        else {
            return Err(SqlError::new(format!(
                "CREATE INDEX {name}: view '{target}' has no column '{column}'"
            )));
        };
        if columns.contains(field.name()) {
            return Err(SqlError::new(format!(
                "CREATE INDEX {name}: column '{column}' is named twice"
            )));
        }
        columns.push(field.name().clone());
    }
    Ok(IndexDef {
        name,
        view: view.name.clone(),
        columns,
    })
}
