//! The semantic differences between PostgreSQL, whose rules Eddy follows,
//! and SQLite, whose answers the corpus records, where the corpus has no
//! `skipif postgresql` to say so. A failure that one of these rules
//! explains is counted apart from the others: it is Eddy answering as
//! PostgreSQL does, not a defect. Each rule has an example in
//! `docs/sql.md` ("Where Eddy and SQLite differ").
//!
//! An error is explained by its message. A wrong result is explained only
//! when its query is in a list of queries whose answer was checked
//! against PostgreSQL ([`load`]; `sql-tests/sqlite-differences.txt`,
//! written by `scripts/postgres-differences.py`): the corpus's query at
//! that file and line, where PostgreSQL 15 gives Eddy's answer.

use std::sync::OnceLock;

/// A documented difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Difference {
    /// A short name, used to group failures.
    pub name: &'static str,
    /// What the rule is, in one line.
    pub rule: &'static str,
}

/// A string compared with a number.
pub const STRING_AS_NUMBER: Difference = Difference {
    name: "string compared with a number",
    rule: "the string is cast to the number's type, an error if it is not a number; \
           SQLite orders every number before every string",
};

/// A blob compared with a number.
pub const BLOB_AS_NUMBER: Difference = Difference {
    name: "blob compared with a number",
    rule: "a type error; SQLite orders every number before every blob",
};

/// CASE, COALESCE and NULLIF have one type, chosen from all branches.
pub const STATIC_TYPES: Difference = Difference {
    name: "one type for all branches",
    rule: "COALESCE(30, AVG(x)) is a float (PostgreSQL: numeric) even when it is 30, so / \
           divides as floats; SQLite's values keep their own type",
};

/// A row's expression that fails is NULL as a whole.
pub const ROW_ERROR: Difference = Difference {
    name: "a failing expression is NULL",
    rule: "an expression that fails on a row (x / 0) is NULL as a whole and counted; \
           PostgreSQL stops with an error, SQLite makes only the division NULL",
};

/// Every documented difference.
pub const ALL: &[Difference] = &[STRING_AS_NUMBER, BLOB_AS_NUMBER, STATIC_TYPES, ROW_ERROR];

/// Queries checked against PostgreSQL: (file path suffix, line, rule).
static CHECKED: OnceLock<Vec<(String, u32, Difference)>> = OnceLock::new();

/// Loads the list of checked queries: one `PATH:LINE RULE` per line (PATH
/// relative to the corpus's `test/` folder, RULE a [`Difference`]'s name
/// with spaces as dashes), `#` comments. Returns how many it holds.
pub fn load(path: &std::path::Path) -> Result<usize, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut checked = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || format!("{}:{}: expected PATH:LINE RULE", path.display(), i + 1);
        let (place, rule) = line.split_once(char::is_whitespace).ok_or_else(bad)?;
        let (file, at) = place.rsplit_once(':').ok_or_else(bad)?;
        let at: u32 = at.parse().map_err(|_| bad())?;
        let rule = rule.trim();
        let difference = ALL
            .iter()
            .find(|d| d.name.replace(' ', "-") == rule)
            .ok_or_else(|| format!("{}:{}: no rule '{rule}'", path.display(), i + 1))?;
        checked.push((file.to_string(), at, *difference));
    }
    let n = checked.len();
    CHECKED
        .set(checked)
        .map_err(|_| "the list of checked queries is already loaded".to_string())?;
    Ok(n)
}

/// The checked difference of the query at `line` of `file`, if listed.
fn checked(file: &str, line: u32) -> Option<Difference> {
    let file = file.replace('\\', "/");
    CHECKED.get()?.iter().find_map(|(suffix, at, d)| {
        (*at == line && (file == *suffix || file.ends_with(&format!("/{suffix}")))).then_some(*d)
    })
}

/// The documented difference that explains a failure (with `reason`) of
/// the record at `line` of `file`, if one does.
pub fn explain(file: &str, line: u32, reason: &str) -> Option<Difference> {
    if let Some(d) = checked(file, line) {
        return Some(d);
    }
    if reason.contains("Cannot cast string") {
        return Some(STRING_AS_NUMBER);
    }
    if reason.contains("Binary can't cast to") {
        return Some(BLOB_AS_NUMBER);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_explained_by_their_rule() {
        let divide = "Arrow error: Divide by zero error";
        assert_eq!(explain("a.test", 1, divide), None);
        let cast = "Cast error: Cannot cast string 'hello' to value of Int32 type";
        assert_eq!(explain("a.test", 2, cast), Some(STRING_AS_NUMBER));
        let blob = "Error during planning: expr type Binary can't cast to Int32 in InSubquery";
        assert_eq!(explain("a.test", 3, blob), Some(BLOB_AS_NUMBER));
        assert_eq!(explain("a.test", 4, "expected [1] got [2]"), None);
        assert_eq!(explain("a.test", 5, "table 'nope' not found"), None);
    }

    /// The list in the repository names rules that exist, and a wrong
    /// result is explained only at a listed place.
    #[test]
    fn the_checked_list_loads() {
        let list = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../sql-tests/sqlite-differences.txt");
        assert!(load(&list).unwrap() > 0);
        let (file, line, d) = CHECKED.get().unwrap()[0].clone();
        let path = format!("/somewhere/test/{file}");
        assert_eq!(explain(&path, line, "expected [1] got [2]"), Some(d));
        assert_eq!(explain(&path, line + 1, "expected [1] got [2]"), None);
        assert_eq!(
            explain(&format!("/x/other_{file}"), line, "expected [1] got [2]"),
            None
        );
    }
}
