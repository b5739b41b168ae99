//! Feldera's rules for ROW values (comparisons.md): every form that asks
//! for the equality of two ROWs is refused with the reason and the
//! rewrite, while `IS [NOT] DISTINCT FROM`, `<=>`, ordering comparisons
//! and grouping stay legal. PostgreSQL's rules compare ROWs field by
//! field.

use eddy_sql::{Program, Rules};

const TABLES: &str = "
CREATE TYPE point AS (x INT, y INT);
CREATE TABLE l (id INT, p point, q ROW(a INT, b VARCHAR));
CREATE TABLE r (id INT, p point);
";

fn check(view: &str, rules: Rules) -> Result<Program, String> {
    Program::parse_with(&format!("{TABLES}\nCREATE VIEW v AS {view};"), rules)
        .map_err(|e| e.to_string())
}

#[test]
fn equality_of_rows_is_refused_in_every_form() {
    let refused = [
        ("SELECT p = p FROM l", "using '='"),
        ("SELECT q <> ROW(1, 'a') FROM l", "using '<>'"),
        ("SELECT l.id FROM l JOIN r ON l.p = r.p", "using '='"),
        ("SELECT * FROM l NATURAL JOIN r", "using '='"),
        ("SELECT l.id FROM l JOIN r USING (p)", "using '='"),
        (
            "SELECT id FROM l WHERE p IN (ROW(1, 2), ROW(3, 4))",
            "using '='",
        ),
        ("SELECT id FROM l WHERE p IN (SELECT p FROM r)", "using '='"),
        (
            "SELECT CASE p WHEN ROW(1, 2) THEN 1 ELSE 0 END FROM l",
            "using '='",
        ),
        (
            "SELECT NULLIF(p, ROW(1, 2)) FROM l",
            "'NULLIF' compares row values",
        ),
    ];
    for (view, needle) in refused {
        let err = check(view, Rules::Feldera).expect_err(view);
        assert!(err.contains(needle), "{view}: {err}");
        check(view, Rules::Postgres).unwrap_or_else(|e| panic!("{view} (PostgreSQL): {e}"));
    }
}

#[test]
fn distinctness_ordering_and_grouping_of_rows_stay_legal() {
    for view in [
        "SELECT p IS NOT DISTINCT FROM ROW(1, 2), p IS DISTINCT FROM p, p <=> p FROM l",
        "SELECT p < ROW(1, 2), q >= ROW(0, 'z') FROM l",
        "SELECT l.id FROM l JOIN r ON l.p IS NOT DISTINCT FROM r.p",
        "SELECT p, COUNT(*) AS n FROM l GROUP BY p",
        "SELECT DISTINCT p FROM l",
        "SELECT p FROM l UNION SELECT p FROM r",
        "SELECT id FROM l WHERE id = 1",
    ] {
        check(view, Rules::Feldera).unwrap_or_else(|e| panic!("{view}: {e}"));
    }
}
