//! Mutually recursive views (`DECLARE RECURSIVE VIEW`): Feldera's own
//! example, mutual and non-linear recursion checked after every step
//! against a naive fixed point over random graphs whose edges are inserted
//! and deleted, and the programs that are refused.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::arrow::array::{Int32Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use eddy_dbsp::ZSet;
use eddy_sql::{Pipeline, Program};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type Edge = (i32, i32);

fn edges(rows: &[Edge], weight: i64) -> ZSet {
    let schema = Arc::new(Schema::new(vec![
        Field::new("x", DataType::Int32, true),
        Field::new("y", DataType::Int32, true),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(rows.iter().map(|e| e.0).collect::<Int32Array>()),
            Arc::new(rows.iter().map(|e| e.1).collect::<Int32Array>()),
        ],
    )
    .unwrap();
    ZSet::with_weight(batch, weight)
}

fn rows(p: &Pipeline, view: &str) -> Vec<String> {
    common::sorted_rows(&p.view_rows(view).unwrap())
}

fn pairs(set: &BTreeSet<Edge>) -> Vec<String> {
    let mut out: Vec<String> = set.iter().map(|(x, y)| format!("{x}|{y}")).collect();
    out.sort();
    out
}

/// Paths of odd and of even length (at least 2) over `edges`.
fn odd_even(edges: &BTreeSet<Edge>) -> (BTreeSet<Edge>, BTreeSet<Edge>) {
    let mut odd = edges.clone();
    let mut even = BTreeSet::new();
    loop {
        let step = |from: &BTreeSet<Edge>| -> BTreeSet<Edge> {
            let mut out = BTreeSet::new();
            for &(x, y) in edges {
                for &(a, b) in from {
                    if y == a {
                        out.insert((x, b));
                    }
                }
            }
            out
        };
        let new_even = step(&odd);
        let mut new_odd = edges.clone();
        new_odd.extend(step(&even));
        if new_even == even && new_odd == odd {
            return (odd, even);
        }
        (odd, even) = (new_odd, new_even);
    }
}

const CLOSURE: &str = "
CREATE TABLE edges(x INT, y INT);
DECLARE RECURSIVE VIEW closure(x INT, y INT);
CREATE LOCAL VIEW step AS
SELECT e.x, closure.y
FROM edges e
JOIN closure ON e.y = closure.x;
CREATE MATERIALIZED VIEW closure AS
(SELECT * FROM edges)
UNION
(SELECT * FROM step);
";

#[test]
fn feldera_closure_example() {
    let mut p = Pipeline::new(Program::parse(CLOSURE).unwrap()).unwrap();
    p.push("edges", edges(&[(0, 1)], 1)).unwrap();
    p.step().unwrap();
    assert_eq!(rows(&p, "closure"), ["0|1"]);
    p.push("edges", edges(&[(1, 2)], 1)).unwrap();
    p.step().unwrap();
    assert_eq!(rows(&p, "closure"), ["0|1", "0|2", "1|2"]);
    p.push("edges", edges(&[(0, 1)], -1)).unwrap();
    p.step().unwrap();
    assert_eq!(rows(&p, "closure"), ["1|2"]);
}

/// Random graphs over few nodes (so cycles are common), edges inserted and
/// deleted in random steps: mutual recursion (paths of odd and even
/// length) and a closure that joins the recursive view with itself.
#[test]
fn mutual_and_nonlinear_recursion_match_a_naive_fixed_point() {
    let program = "
        CREATE TABLE edges(x INT, y INT);
        DECLARE RECURSIVE VIEW odd(x INT, y INT);
        DECLARE RECURSIVE VIEW even(x INT, y INT);
        DECLARE RECURSIVE VIEW squared(x INT, y INT);
        CREATE VIEW odd AS SELECT * FROM edges
            UNION SELECT e.x, v.y FROM edges e JOIN even v ON e.y = v.x;
        CREATE VIEW even AS SELECT e.x, v.y FROM edges e JOIN odd v ON e.y = v.x;
        CREATE VIEW squared AS SELECT * FROM edges
            UNION SELECT a.x, b.y FROM squared a JOIN squared b ON a.y = b.x;
        CREATE VIEW reach AS SELECT x, COUNT(*) AS n FROM squared GROUP BY x;
    ";
    for seed in 0..20u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut p = Pipeline::new(Program::parse(program).unwrap()).unwrap();
        let mut graph: BTreeSet<Edge> = BTreeSet::new();
        for _ in 0..12 {
            let mut inserted = Vec::new();
            let mut deleted = Vec::new();
            for _ in 0..rng.gen_range(0..4) {
                let e = (rng.gen_range(0..7), rng.gen_range(0..7));
                if graph.insert(e) {
                    inserted.push(e);
                }
            }
            for _ in 0..rng.gen_range(0..3) {
                if graph.is_empty() {
                    break;
                }
                let e = *graph.iter().nth(rng.gen_range(0..graph.len())).unwrap();
                if !inserted.contains(&e) {
                    graph.remove(&e);
                    deleted.push(e);
                }
            }
            p.push("edges", edges(&inserted, 1)).unwrap();
            p.push("edges", edges(&deleted, -1)).unwrap();
            p.step().unwrap();
            let (odd, even) = odd_even(&graph);
            let closure: BTreeSet<Edge> = odd.union(&even).copied().collect();
            assert_eq!(rows(&p, "odd"), pairs(&odd), "seed {seed}");
            assert_eq!(rows(&p, "even"), pairs(&even), "seed {seed}");
            assert_eq!(rows(&p, "squared"), pairs(&closure), "seed {seed}");
            let mut counts: Vec<String> = (0..7)
                .filter_map(|x| {
                    let n = closure.iter().filter(|e| e.0 == x).count();
                    (n > 0).then(|| format!("{x}|{n}"))
                })
                .collect();
            counts.sort();
            assert_eq!(rows(&p, "reach"), counts, "seed {seed}");
        }
    }
}

#[test]
fn refused_recursion_says_why() {
    let refused = [
        (
            "CREATE TABLE e(x INT, y INT);
             DECLARE RECURSIVE VIEW c(x INT, n BIGINT);
             CREATE VIEW c AS SELECT x, COUNT(*) FROM (SELECT x FROM e UNION ALL SELECT x FROM c) t GROUP BY x;",
            "an aggregate (GROUP BY) over a recursive relation",
        ),
        (
            "CREATE TABLE e(x INT, y INT);
             DECLARE RECURSIVE VIEW c(x INT, y INT);
             CREATE VIEW c AS SELECT * FROM e WHERE x NOT IN (SELECT y FROM c);",
            "negated or NULL-padded side reads the recursion",
        ),
        (
            "CREATE TABLE e(x INT, y INT);
             DECLARE RECURSIVE VIEW c(x INT, y INT);",
            "the program never defines 'c'",
        ),
        (
            "CREATE TABLE e(x INT, y INT);
             DECLARE RECURSIVE VIEW c(x INT, y INT);
             CREATE VIEW c AS SELECT x FROM e;",
            "declared with 2 columns but its query has 1",
        ),
        (
            "CREATE TABLE e(x INT, y INT);
             CREATE VIEW v AS WITH RECURSIVE r(a, b) AS (SELECT x, y FROM e UNION
               SELECT p.a, q.b FROM r p JOIN r q ON p.b = q.a) SELECT * FROM r;",
            "joins 'r' with itself",
        ),
        (
            "CREATE TABLE e(x INT, y INT);
             CREATE VIEW v AS WITH RECURSIVE r(a) AS (SELECT x FROM e UNION
               SELECT a + 1 FROM (SELECT a, ROW_NUMBER() OVER (ORDER BY a) AS n FROM r) t
               WHERE n < 3) SELECT * FROM r;",
            "a window function over a recursive relation",
        ),
    ];
    for (text, expected) in refused {
        let error = Program::parse(text)
            .and_then(Pipeline::new)
            .err()
            .unwrap_or_else(|| panic!("accepted: {text}"));
        assert!(
            error.to_string().contains(expected),
            "{text}\nsaid: {error}\nexpected: {expected}"
        );
    }
}

/// A `UNION ALL` recursion over a cycle never converges: the step fails
/// with a message instead of running forever.
#[test]
fn divergent_recursion_is_an_error() {
    let text = "CREATE TABLE e(x INT, y INT);
        CREATE VIEW v AS WITH RECURSIVE r(a, d) AS (SELECT x, 0 FROM e UNION ALL
            SELECT e.y, r.d FROM r JOIN e ON r.a = e.x) SELECT * FROM r;";
    let mut p = Pipeline::new(Program::parse(text).unwrap()).unwrap();
    p.push("e", edges(&[(1, 2), (2, 1)], 1)).unwrap();
    let error = p.step().unwrap_err().to_string();
    assert!(error.contains("did not reach a fixed point"), "{error}");
}

/// A `UNION ALL` that builds ever longer strings over a cycle never
/// repeats a row: the step fails once the iterations have produced more
/// than the step's budget, instead of exhausting memory.
#[test]
fn recursion_that_keeps_growing_is_an_error() {
    let text = "CREATE TABLE nodes(id INT, label VARCHAR, parent INT);
        CREATE VIEW v AS WITH RECURSIVE t(id, path) AS (
            SELECT id, label FROM nodes WHERE parent IS NULL
            UNION ALL SELECT n.id, t.path || '/' || n.label FROM nodes n JOIN t ON n.parent = t.id)
        SELECT path FROM t;";
    let mut p = Pipeline::new(Program::parse(text).unwrap()).unwrap();
    let schema = Arc::clone(&p.program().tables[0].schema);
    let label = "x".repeat(10_000);
    // 1 is a root; 2 and 3 are each other's parent, and 2's parent is also 1.
    let rows = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int32Array::from(vec![1, 2, 3, 2])),
            Arc::new(datafusion::arrow::array::StringArray::from(vec![
                label.as_str(),
                label.as_str(),
                label.as_str(),
                label.as_str(),
            ])),
            Arc::new(Int32Array::from(vec![None, Some(3), Some(2), Some(1)])),
        ],
    )
    .unwrap();
    p.push("nodes", ZSet::with_weight(rows, 1)).unwrap();
    let error = p.step().unwrap_err().to_string();
    assert!(error.contains("MiB of changes in one step"), "{error}");
}
