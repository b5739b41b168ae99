//! The semantic differences between PostgreSQL, whose rules Eddy follows,
//! and SQLite, whose answers the corpus records, where the corpus has no
//! `skipif postgresql` to say so. A failure that one of these rules
//! explains is counted apart from the others: it is Eddy answering as
//! PostgreSQL does, not a defect. Each rule has an example in
//! `docs/sql.md` ("Where Eddy and SQLite differ").

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

/// Every documented difference.
pub const ALL: &[Difference] = &[STRING_AS_NUMBER, BLOB_AS_NUMBER];

/// The documented difference that explains a failure of `sql` with
/// `reason`, if one does.
pub fn explain(sql: &str, reason: &str) -> Option<Difference> {
    let _ = sql;
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
        assert_eq!(
            explain("SELECT 1 / 0", "Arrow error: Divide by zero error"),
            None
        );
        assert_eq!(
            explain(
                "SELECT 'hello' IN (SELECT x FROM t)",
                "Cast error: Cannot cast string 'hello' to value of Int32 type"
            ),
            Some(STRING_AS_NUMBER)
        );
        assert_eq!(explain("SELECT 1", "expected [1] got [2]"), None);
        assert_eq!(
            explain("SELECT x FROM nope", "table 'nope' not found"),
            None
        );
    }
}
