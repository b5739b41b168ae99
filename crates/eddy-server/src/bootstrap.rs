//! Program changes that keep state: what differs between the program a
//! checkpoint was written by and the one a pipeline starts with.
//!
//! A table is *modified* when its columns (names, types, nullability, order),
//! primary key, `materialized` flag, `LATENESS` or `WITH` options other than
//! its connectors differ; a view when its optimized plan, its
//! `MATERIALIZED` flag, its lateness or its options other than connectors
//! differ, or when it reads a table or view that is added or modified.
//! Connectors alone never modify a relation.
//!
//! Starting the new program from such a checkpoint (bootstrapping) keeps the
//! state of every unchanged table and view, operator by operator (see
//! `eddy_sql::pipeline::Pipeline::take_state`), empties modified tables,
//! and computes new and modified views in a first step from the whole
//! contents of what they read: unchanged views' outputs are not sent
//! again, new and modified views send their whole contents to theirs. A
//! new or modified view may read an unchanged table or view only if it is
//! materialized or, for a table, has a primary key (the checkpoint holds
//! no other relation's contents).

use std::collections::{BTreeMap, BTreeSet};

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::logical_expr::LogicalPlan;
use eddy_sql::catalog::{TableDef, ViewDef};
use eddy_sql::Program;
use serde_json::{json, Value};

/// What a start does when the program changed since the checkpoint it
/// would resume from (`?bootstrap_policy=`, as Feldera names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootstrapPolicy {
    /// Keep what did not change and compute the rest.
    Allow,
    /// Refuse to start, keeping the checkpoint.
    Reject,
    /// Wait, stopped, until `POST /approve` (the default).
    AwaitApproval,
}

impl std::str::FromStr for BootstrapPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "allow" => Ok(Self::Allow),
            "reject" => Ok(Self::Reject),
            "await_approval" => Ok(Self::AwaitApproval),
            other => Err(format!(
                "unknown bootstrap_policy '{other}' (allow, reject, await_approval)"
            )),
        }
    }
}

/// How the relations of one kind changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Changes {
    /// In the new program only.
    pub added: Vec<String>,
    /// In both, different.
    pub modified: Vec<String>,
    /// In the old program only.
    pub removed: Vec<String>,
    /// In both, the same.
    pub unchanged: Vec<String>,
}

impl Changes {
    fn to_json(&self) -> Value {
        json!({
            "added": self.added,
            "modified": self.modified,
            "removed": self.removed,
            "unchanged": self.unchanged,
        })
    }

    fn is_change(&self) -> bool {
        !(self.added.is_empty() && self.modified.is_empty() && self.removed.is_empty())
    }
}

/// What differs between two programs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProgramDiff {
    /// Tables.
    pub tables: Changes,
    /// Views.
    pub views: Changes,
}

impl ProgramDiff {
    /// Whether anything differs.
    pub fn is_change(&self) -> bool {
        self.tables.is_change() || self.views.is_change()
    }

    /// As reported in `deployment_runtime_status_details`.
    pub fn to_json(&self) -> Value {
        json!({"tables": self.tables.to_json(), "views": self.views.to_json()})
    }

    /// A sentence listing the changes.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (kind, c) in [("table", &self.tables), ("view", &self.views)] {
            for (what, names) in [
                ("added", &c.added),
                ("modified", &c.modified),
                ("removed", &c.removed),
            ] {
                if !names.is_empty() {
                    parts.push(format!("{kind}s {what}: {}", names.join(", ")));
                }
            }
        }
        parts.join("; ")
    }

    /// Why the new program cannot start from the old one's state, if it
    /// cannot.
    pub fn obstacles(&self, old: &Program, new: &Program) -> Vec<String> {
        // A new or modified view is computed from the whole contents of the
        // kept relations it reads, which are kept only when materialized
        // (or, for a table, when it has a primary key).
        let mut out = Vec::new();
        for name in self.views.added.iter().chain(&self.views.modified) {
            let Some(view) = new.views.iter().find(|v| &v.name == name) else {
                continue;
            };
            for read in reads(&view.plan) {
                let kept = self.tables.unchanged.contains(&read);
                if kept && old.table(&read).is_some_and(|t| !t.keeps_rows()) {
                    out.push(format!(
                        "view '{name}' is computed from table '{read}', which is not materialized, so the checkpoint does not hold its contents"
                    ));
                }
                let kept = self.views.unchanged.contains(&read);
                if kept && old.views.iter().any(|v| v.name == read && !v.materialized) {
                    out.push(format!(
                        "view '{name}' is computed from view '{read}', which is not materialized, so the checkpoint does not hold its contents"
                    ));
                }
            }
        }
        out
    }
}

/// A table's definition, connectors left out.
fn table_signature(t: &TableDef) -> String {
    let columns: Vec<String> = t
        .schema
        .fields()
        .iter()
        .map(|f| format!("{} {} {}", f.name(), f.data_type(), f.is_nullable()))
        .collect();
    let options = options(&t.options);
    format!(
        "{columns:?} key {:?} materialized {} lateness {:?} options {options:?}",
        t.primary_key, t.materialized, t.lateness
    )
}

/// A view's definition, connectors left out.
fn view_signature(v: &ViewDef) -> String {
    format!(
        "{} materialized {} lateness {:?} recursive {} options {:?}",
        v.plan.display_indent(),
        v.materialized,
        v.lateness,
        v.recursive.is_some(),
        options(&v.options)
    )
}

/// `WITH (…)` options other than connectors, in a fixed order.
fn options(options: &[(String, String)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = options
        .iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("connectors"))
        .map(|(k, v)| (k.to_lowercase(), v.clone()))
        .collect();
    out.sort();
    out
}

/// The tables and views a plan reads.
fn reads(plan: &LogicalPlan) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            out.insert(scan.table_name.table().to_string());
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

/// What differs between `old` and `new`.
pub fn diff(old: &Program, new: &Program) -> ProgramDiff {
    let mut tables = Changes::default();
    let old_tables: BTreeMap<&str, String> = old
        .tables
        .iter()
        .map(|t| (t.name.as_str(), table_signature(t)))
        .collect();
    for t in &new.tables {
        match old_tables.get(t.name.as_str()) {
            None => tables.added.push(t.name.clone()),
            Some(s) if *s == table_signature(t) => tables.unchanged.push(t.name.clone()),
            Some(_) => tables.modified.push(t.name.clone()),
        }
    }
    tables.removed = old
        .tables
        .iter()
        .filter(|t| new.table(&t.name).is_none())
        .map(|t| t.name.clone())
        .collect();
    let mut views = Changes::default();
    let old_views: BTreeMap<&str, String> = old
        .views
        .iter()
        .map(|v| (v.name.as_str(), view_signature(v)))
        .collect();
    // Relations whose contents may differ: added and modified tables and
    // views, and every view reading one.
    let mut changed: BTreeSet<String> = tables
        .added
        .iter()
        .chain(&tables.modified)
        .chain(&tables.removed)
        .cloned()
        .collect();
    for v in &new.views {
        if old_views.get(v.name.as_str()) != Some(&view_signature(v)) {
            changed.insert(v.name.clone());
        }
    }
    // Until nothing more changes: a view may read a later one (in a
    // recursive group), and a group is kept or computed whole, since its
    // members share their operators.
    loop {
        let before = changed.len();
        for v in &new.views {
            if reads(&v.plan).iter().any(|r| changed.contains(r)) {
                changed.insert(v.name.clone());
            }
            let group_changed = v.recursive.is_some()
                && new
                    .views
                    .iter()
                    .any(|m| m.recursive == v.recursive && changed.contains(&m.name));
            if group_changed {
                changed.insert(v.name.clone());
            }
        }
        if changed.len() == before {
            break;
        }
    }
    for v in &new.views {
        if !changed.contains(&v.name) {
            views.unchanged.push(v.name.clone());
        } else if old_views.contains_key(v.name.as_str()) {
            views.modified.push(v.name.clone());
        } else {
            views.added.push(v.name.clone());
        }
    }
    views.removed = old
        .views
        .iter()
        .filter(|v| !new.views.iter().any(|n| n.name == v.name))
        .map(|v| v.name.clone())
        .collect();
    ProgramDiff { tables, views }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(sql: &str) -> Program {
        Program::parse(sql).unwrap()
    }

    #[test]
    fn changes_reach_the_views_that_read_them() {
        let old = program(
            "CREATE TABLE t (k INT, x INT) WITH ('materialized' = 'true');
             CREATE TABLE u (k INT, y INT) WITH ('materialized' = 'true');
             CREATE MATERIALIZED VIEW a AS SELECT k, SUM(x) AS s FROM t GROUP BY k;
             CREATE VIEW b AS SELECT t.k, y FROM t JOIN u ON t.k = u.k;
             CREATE VIEW c AS SELECT k, s FROM a WHERE s > 1;
             CREATE VIEW gone AS SELECT k FROM u;",
        );
        let new = program(
            "CREATE TABLE t (k INT, x INT) WITH ('materialized' = 'true', 'connectors' = '[]');
             CREATE TABLE u (k INT, y BIGINT) WITH ('materialized' = 'true');
             CREATE MATERIALIZED VIEW a AS SELECT k, SUM(x) AS s FROM t GROUP BY k;
             CREATE VIEW b AS SELECT t.k, y FROM t JOIN u ON t.k = u.k;
             CREATE VIEW c AS SELECT k, s FROM a WHERE s > 2;
             CREATE VIEW d AS SELECT k FROM c;",
        );
        let d = diff(&old, &new);
        assert_eq!(d.tables.unchanged, vec!["t"]);
        assert_eq!(d.tables.modified, vec!["u"]);
        assert_eq!(d.views.unchanged, vec!["a"]);
        assert_eq!(d.views.modified, vec!["b", "c"]);
        assert_eq!(d.views.added, vec!["d"]);
        assert_eq!(d.views.removed, vec!["gone"]);
        assert!(d.is_change());
        assert!(d.obstacles(&old, &new).is_empty());
        assert!(!diff(&old, &old).is_change());
        let plain = program("CREATE TABLE t (k INT, x INT); CREATE VIEW a AS SELECT k FROM t;");
        let more = program(
            "CREATE TABLE t (k INT, x INT); CREATE VIEW a AS SELECT k FROM t; CREATE VIEW b AS SELECT x FROM t;",
        );
        let d = diff(&plain, &more);
        assert_eq!(
            d.obstacles(&plain, &more).len(),
            1,
            "{:?}",
            d.obstacles(&plain, &more)
        );
        // A view read by a new one must be materialized too.
        let over_view = program(
            "CREATE TABLE t (k INT, x INT); CREATE VIEW a AS SELECT k FROM t; CREATE VIEW b AS SELECT k FROM a;",
        );
        let obstacles = diff(&plain, &over_view).obstacles(&plain, &over_view);
        assert_eq!(
            obstacles,
            vec!["view 'b' is computed from view 'a', which is not materialized, so the checkpoint does not hold its contents"]
        );
    }

    #[test]
    fn a_change_reaches_views_defined_before_it_and_whole_recursive_groups() {
        let closure = |base: &str| {
            program(&format!(
                "CREATE TABLE edges (x INT, y INT);
                 DECLARE RECURSIVE VIEW closure (x INT, y INT);
                 CREATE VIEW early AS SELECT COUNT(*) AS n FROM closure;
                 CREATE LOCAL VIEW step AS SELECT e.x, closure.y FROM edges e JOIN closure ON e.y = closure.x;
                 CREATE VIEW closure AS ({base}) UNION (SELECT * FROM step);
                 CREATE VIEW other AS SELECT x FROM edges;"
            ))
        };
        let old = closure("SELECT * FROM edges");
        let new = closure("SELECT * FROM edges WHERE x > 0");
        let d = diff(&old, &new);
        assert_eq!(d.views.unchanged, vec!["other"]);
        let mut modified = d.views.modified.clone();
        modified.sort();
        assert_eq!(modified, vec!["closure", "early", "step"]);
    }
}
