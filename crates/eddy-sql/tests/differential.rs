//! Differential test: random programs over random tables and random change
//! batches. After every step, every view's integrated contents must equal
//! DataFusion's batch result of the view's query over the tables' current
//! contents. Seeded and bounded; `EDDY_DIFF_CASES=N` runs more cases and
//! `EDDY_DIFF_SEED=S` picks another seed.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use eddy_dbsp::{Storage, ZSet};
use eddy_sql::{Pipeline, Program, Rules};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const TABLES: &str = "CREATE TABLE t1 (a BIGINT, b BIGINT, c VARCHAR);\n\
                      CREATE TABLE t2 (a BIGINT, b BIGINT, d BIGINT);\n";

/// The same tables, declared append-only: the deletions the test sends
/// are refused, and operators over them keep less state.
const APPEND_ONLY_TABLES: &str =
    "CREATE TABLE t1 (a BIGINT, b BIGINT, c VARCHAR) WITH ('append_only' = 'true');\n\
     CREATE TABLE t2 (a BIGINT, b BIGINT, d BIGINT) WITH ('append_only' = 'true');\n";

fn schema_t1() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int64, true),
        Field::new("b", DataType::Int64, true),
        Field::new("c", DataType::Utf8, true),
    ]))
}

fn schema_t2() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int64, true),
        Field::new("b", DataType::Int64, true),
        Field::new("d", DataType::Int64, true),
    ]))
}

/// A small domain with NULLs, so that joins match and NULL rules matter.
fn value(rng: &mut StdRng) -> Option<i64> {
    if rng.gen_range(0..8) == 0 {
        None
    } else {
        Some(rng.gen_range(0..6))
    }
}

fn random_rows(rng: &mut StdRng, schema: &SchemaRef, n: usize) -> RecordBatch {
    let a: Int64Array = (0..n).map(|_| value(rng)).collect();
    let b: Int64Array = (0..n).map(|_| value(rng)).collect();
    let last: Arc<dyn datafusion::arrow::array::Array> =
        if schema.field(2).data_type() == &DataType::Utf8 {
            Arc::new(
                (0..n)
                    .map(|_| value(rng).map(|v| format!("s{v}")))
                    .collect::<StringArray>(),
            )
        } else {
            Arc::new((0..n).map(|_| value(rng)).collect::<Int64Array>())
        };
    RecordBatch::try_new(Arc::clone(schema), vec![Arc::new(a), Arc::new(b), last]).unwrap()
}

fn pick<'a>(rng: &mut StdRng, xs: &[&'a str]) -> &'a str {
    xs.choose(rng).unwrap()
}

/// One random query over t1 and t2, with the text the oracle runs when
/// DataFusion cannot execute the query as written (it has no executor for a
/// scalar subquery correlated by a non-equality): an equivalent hand-written
/// join and aggregate.
fn random_query(rng: &mut StdRng) -> (String, String) {
    match rng.gen_range(0..7) {
        0 => return time_query(rng),
        1 => {
            let q = recursive_query(rng);
            return (q.clone(), q);
        }
        _ => {}
    }
    let q = random_query_text(rng);
    if let Some(rest) = q.strip_prefix("SELECT a, (SELECT COUNT(*) FROM t2 WHERE t2.b ") {
        let cmp = rest.split_whitespace().next().unwrap();
        let oracle = format!(
            "SELECT x.a, COALESCE(c.n, 0) AS n FROM t1 AS x LEFT JOIN \
             (SELECT o.b AS ob, COUNT(*) AS n FROM (SELECT DISTINCT b FROM t1) AS o JOIN t2 ON t2.b {cmp} o.b GROUP BY o.b) AS c \
             ON x.b = c.ob"
        );
        return (q, oracle);
    }
    (q.clone(), q)
}

/// A windowed or ASOF query, with the same question in plain SQL for the
/// oracle (DataFusion has no window table functions or ASOF joins): `b`
/// serves as an integer time.
fn time_query(rng: &mut StdRng) -> (String, String) {
    let size: i64 = rng.gen_range(1..5);
    let slide = rng.gen_range(1..=size);
    // tumble_start(b) = b - ((b % size) + size) % size, for negative b too.
    let start = |w: i64| format!("(b - ((b % {w}) + {w}) % {w})");
    match rng.gen_range(0..5) {
        4 => session_query(rng),
        0 => (
            format!(
                "SELECT window_start, window_end, COUNT(*) AS n, SUM(a) AS s \
                 FROM TABLE(TUMBLE(TABLE t1, DESCRIPTOR(b), {size})) GROUP BY window_start, window_end"
            ),
            format!(
                "SELECT {s} AS window_start, {s} + {size} AS window_end, COUNT(*) AS n, SUM(a) AS s \
                 FROM t1 WHERE b IS NOT NULL GROUP BY {s}, {s} + {size}",
                s = start(size)
            ),
        ),
        1 => {
            let n = (size + slide - 1) / slide;
            let ks: Vec<String> = (0..n).map(|k| format!("({k})")).collect();
            (
                format!(
                    "SELECT a, window_start, COUNT(*) AS n FROM TABLE(HOP(TABLE t1, DESCRIPTOR(b), {slide}, {size})) \
                     GROUP BY a, window_start"
                ),
                format!(
                    "SELECT a, ws AS window_start, COUNT(*) AS n FROM \
                     (SELECT a, b, {s} - k * {slide} AS ws FROM t1 CROSS JOIN (VALUES {}) AS h(k)) AS x \
                     WHERE b < ws + {size} GROUP BY a, ws",
                    ks.join(", "),
                    s = start(slide)
                ),
            )
        }
        2 => (
            format!(
                "SELECT a, COUNT(*) AS n, TUMBLE_START(b, {size}) AS ws FROM t1 GROUP BY a, TUMBLE(b, {size})"
            ),
            format!("SELECT a, COUNT(*) AS n, {s} AS ws FROM t1 GROUP BY a, {s}", s = start(size)),
        ),
        _ => {
            let (cmp, agg) = *[(">=", "MAX"), (">", "MAX"), ("<=", "MIN"), ("<", "MIN")]
                .choose(rng)
                .unwrap();
            let flipped = match cmp {
                ">=" => "<=",
                ">" => "<",
                "<=" => ">=",
                _ => ">",
            };
            (
                format!(
                    "SELECT DISTINCT t1.a, t1.b, t1.c, t2.b AS rb FROM t1 LEFT ASOF JOIN t2 \
                     MATCH_CONDITION (t1.b {cmp} t2.b) ON t1.a = t2.a"
                ),
                format!(
                    "SELECT t1.a, t1.b, t1.c, {agg}(t2.b) AS rb FROM t1 LEFT JOIN t2 \
                     ON t1.a = t2.a AND t2.b {flipped} t1.b GROUP BY t1.a, t1.b, t1.c"
                ),
            )
        }
    }
}

/// A query over session windows of `b` (keyed by `a`, or not), with the
/// oracle's plain SQL: a row starts a session unless the previous row of
/// its key is less than the gap before it, and sessions are numbered by a
/// running count of starts. A row whose time is NULL is in no session
/// (table.md), in the table function and in `GROUP BY SESSION(b, gap)`,
/// which is planned through it.
fn session_query(rng: &mut StdRng) -> (String, String) {
    let gap: i64 = rng.gen_range(1..3);
    let (query, key) = match rng.gen_range(0..3) {
        0 => (
            format!(
                "SELECT a, window_start, window_end, COUNT(*) AS n FROM \
                 TABLE(SESSION(TABLE t1, DESCRIPTOR(b), DESCRIPTOR(a), {gap})) \
                 GROUP BY a, window_start, window_end"
            ),
            true,
        ),
        1 => (
            format!(
                "SELECT a, SESSION_START(b, {gap}) AS window_start, SESSION_END(b, {gap}) AS window_end, \
                 COUNT(*) AS n FROM t1 GROUP BY a, SESSION(b, {gap})"
            ),
            true,
        ),
        _ => (
            format!(
                "SELECT window_start, window_end, COUNT(*) AS n, SUM(a) AS s FROM \
                 TABLE(SESSION(TABLE t1, DESCRIPTOR(b), {gap})) GROUP BY window_start, window_end"
            ),
            false,
        ),
    };
    let (by, select, group, counts) = if key {
        ("PARTITION BY a ", "a, ", "a, ", "COUNT(*)")
    } else {
        ("", "", "", "COUNT(*), SUM(a)")
    };
    let oracle = format!(
        "SELECT {select}MIN(b) AS window_start, MAX(b) + {gap} AS window_end, {counts} FROM \
         (SELECT a, b, SUM(s) OVER ({by}ORDER BY b ROWS UNBOUNDED PRECEDING) AS sid FROM \
         (SELECT a, b, CASE WHEN LAG(b) OVER ({by}ORDER BY b) + {gap} > b THEN 0 ELSE 1 END AS s \
         FROM t1 WHERE b IS NOT NULL) AS x) AS y GROUP BY {group}sid"
    );
    (query, oracle)
}

/// A recursive query over t1 and t2 (values are small, so their graphs
/// have cycles): DataFusion executes `WITH RECURSIVE` itself.
fn recursive_query(rng: &mut StdRng) -> String {
    let k: i64 = rng.gen_range(-1..3);
    match rng.gen_range(0..4) {
        0 => "WITH RECURSIVE r(s, d) AS (SELECT a, b FROM t1 UNION \
              SELECT r.s, t1.b FROM r JOIN t1 ON r.d = t1.a) SELECT s, d FROM r"
            .to_string(),
        1 => format!(
            "WITH RECURSIVE r(x, n) AS (SELECT a, 0 FROM t1 UNION ALL \
             SELECT t2.b, r.n + 1 FROM r JOIN t2 ON r.x = t2.a WHERE r.n < 2) \
             SELECT x, n, COUNT(*) AS c FROM r WHERE x > {k} GROUP BY x, n"
        ),
        2 => format!(
            "WITH RECURSIVE r(v) AS (SELECT b FROM t2 WHERE d > {k} UNION \
             SELECT t1.b FROM r JOIN t1 ON t1.a = r.v WHERE t1.b <> {k}) SELECT v FROM r"
        ),
        _ => "WITH RECURSIVE r(s, d) AS (SELECT a, b FROM t1 UNION \
              SELECT r.s, t2.b FROM r JOIN t2 ON r.d = t2.a \
              WHERE r.s IN (SELECT a FROM t2)) \
              SELECT s, COUNT(d) AS n FROM r GROUP BY s"
            .to_string(),
    }
}

fn random_query_text(rng: &mut StdRng) -> String {
    let k = rng.gen_range(0..6);
    let cmp = pick(rng, &["<", "<=", "=", "<>", ">", ">="]);
    let agg = pick(
        rng,
        &[
            "COUNT(*)",
            "COUNT(t1.b)",
            "SUM(t1.b)",
            "MIN(t1.b)",
            "MAX(t1.b)",
            "AVG(t1.b)",
            "COUNT(DISTINCT t1.b)",
        ],
    );
    let join = pick(rng, &["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"]);
    let setop = pick(rng, &["UNION", "UNION ALL", "EXCEPT", "INTERSECT"]);
    let rank = pick(rng, &["ROW_NUMBER", "RANK", "DENSE_RANK"]);
    let frame = pick(
        rng,
        &[
            "ROWS BETWEEN 1 PRECEDING AND CURRENT ROW",
            "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 FOLLOWING",
            "RANGE BETWEEN 1 PRECEDING AND CURRENT ROW",
            "RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
        ],
    );
    let wagg = pick(rng, &["SUM(b)", "COUNT(*)", "MIN(b)", "MAX(c)", "COUNT(c)"]);
    match rng.gen_range(0..25) {
        0 => format!("SELECT a, b + 1 AS b1, c FROM t1 WHERE b {cmp} {k}"),
        1 => format!("SELECT t1.a, t1.c, t2.d FROM t1 {join} t2 ON t1.a = t2.a"),
        2 => format!("SELECT t1.a, t2.b, t2.d FROM t1 {join} t2 ON t1.a = t2.a AND t1.b {cmp} t2.b"),
        3 => format!("SELECT t1.b, t2.d FROM t1 {join} t2 ON t1.b {cmp} t2.d"),
        4 => format!("SELECT t1.a, {agg} AS x FROM t1 GROUP BY t1.a"),
        5 => format!("SELECT {agg} AS x FROM t1 WHERE t1.a {cmp} {k}"),
        6 => format!("SELECT t1.a, {agg} AS x FROM t1 GROUP BY t1.a HAVING COUNT(*) > 1"),
        7 => format!("SELECT DISTINCT a, c FROM t1 WHERE b {cmp} {k}"),
        8 => format!("SELECT a, b FROM t1 {setop} SELECT a, d FROM t2"),
        9 => format!("SELECT a, b FROM t1 WHERE a IN (SELECT d FROM t2 WHERE b {cmp} {k})"),
        10 => format!("SELECT a, b FROM t1 WHERE a NOT IN (SELECT d FROM t2 WHERE b {cmp} {k})"),
        11 => format!("SELECT a, c FROM t1 WHERE {} EXISTS (SELECT 1 FROM t2 WHERE t2.a = t1.a AND t2.b {cmp} t1.b)",
            pick(rng, &["", "NOT"])),
        12 => format!("SELECT a, (SELECT COUNT(*) FROM t2 WHERE t2.b {cmp} t1.b) AS n FROM t1"),
        13 => format!("SELECT a, b FROM t1 WHERE b {cmp} (SELECT MAX(d) FROM t2)"),
        14 => format!("SELECT t2.a, s.x FROM t2 JOIN (SELECT a, {agg} AS x FROM t1 GROUP BY a) AS s ON s.a = t2.a"),
        15 => format!("SELECT a, b, c FROM t1 ORDER BY a DESC NULLS LAST, b, c LIMIT {}", k + 1),
        // Window functions: ORDER BY every column that could tell tied
        // rows apart, so the answer does not depend on how ties are broken.
        16 => format!("SELECT a, b, c, {rank}() OVER (PARTITION BY a ORDER BY b, c) AS r FROM t1"),
        17 => format!(
            "SELECT {} FROM (SELECT a, b, c, {rank}() OVER (PARTITION BY a ORDER BY b DESC, c) AS r FROM t1) x WHERE r <= {k}",
            pick(rng, &["a, b, c", "a, c", "r, c"])
        ),
        18 => {
            let order = if frame.starts_with("RANGE") { "b" } else { "b, c" };
            format!("SELECT a, b, c, {wagg} OVER (PARTITION BY a ORDER BY {order} {frame}) AS w FROM t1")
        }
        // One function per query: two orders would pair their values
        // differently on duplicate rows, and both pairings are right.
        19 => format!(
            "SELECT a, b, c, {} FROM t1",
            pick(rng, &[
                "LAG(c) OVER (PARTITION BY a ORDER BY b, c) AS p",
                "LEAD(b, 2, -1) OVER (ORDER BY a, b, c) AS n",
                "LAST_VALUE(c) OVER (PARTITION BY b ORDER BY a, c ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS l",
            ])
        ),
        20 => format!("SELECT a, x, {rank}() OVER (ORDER BY x DESC, a) AS r FROM (SELECT a, {agg} AS x FROM t1 GROUP BY a) AS s"),
        21 => "SELECT a, d, COUNT(*) OVER (PARTITION BY d) AS n, FIRST_VALUE(b) OVER (PARTITION BY d ORDER BY a, b) AS f FROM t2".to_string(),
        // Groups ranked by a count (over append-only tables the top-k
        // then keeps only the first rows), and the argmax join of
        // Nexmark's q5.
        22 => format!(
            "SELECT a, b, n FROM (SELECT a, b, n, {} OVER (PARTITION BY a ORDER BY n DESC, b) AS r \
             FROM (SELECT a, b, {} AS n FROM t1 GROUP BY a, b) AS s) AS x WHERE r <= {}",
            pick(rng, &["ROW_NUMBER()", "RANK()"]),
            pick(rng, &["COUNT(*)", "COUNT(c)"]),
            k % 3 + 1
        ),
        23 => "WITH c AS (SELECT a, b, COUNT(*) AS n FROM t1 GROUP BY a, b), \
               m AS (SELECT a, MAX(n) AS top FROM c GROUP BY a) \
               SELECT c.a, c.b, c.n FROM c JOIN m ON c.a = m.a WHERE c.n >= m.top"
            .to_string(),
        _ => format!("SELECT a, b FROM t1 QUALIFY {rank}() OVER (PARTITION BY b ORDER BY a DESC) {cmp} 2"),
    }
}

/// Current contents of a table as a model: rows with positive multiplicity.
struct Model {
    rows: HashMap<String, Vec<RecordBatch>>,
}

/// Runs the case of `seed`: a program of random views over `t1` and `t2`
/// (declared append-only when asked), six steps of random changes, each
/// view compared with DataFusion after each step. The pipeline starts with
/// `workers[0]` workers; before steps 2 and 4 it is checkpointed and
/// resumed with the next number of `workers`, if any (re-splitting each
/// keyed operator's state). With `in_files`, every batch of every trace
/// goes to a file (and a checkpoint links them).
fn run_case(seed: u64, workers: &[usize], append_only: bool, in_files: bool) {
    let mut rng = StdRng::seed_from_u64(seed);
    let queries: Vec<(String, String)> = (0..rng.gen_range(2..6))
        .map(|_| random_query(&mut rng))
        .collect();
    let mut text = match append_only {
        true => APPEND_ONLY_TABLES,
        false => TABLES,
    }
    .to_string();
    for (i, (q, _)) in queries.iter().enumerate() {
        text.push_str(&format!("CREATE VIEW v{i} AS {q};\n"));
    }
    let dir = std::env::temp_dir().join(format!("eddy-diff-{seed}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let storage = in_files.then(|| Storage::open(&dir.join("storage"), 0).unwrap());
    let build = |workers: usize| {
        // The oracle is DataFusion, so the views take its (PostgreSQL's)
        // type rules: AVG of integers is a DOUBLE.
        let program = Program::parse_with(&text, Rules::Postgres)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
        let options = eddy_sql::PipelineOptions {
            storage: storage.clone(),
            workers,
            views: eddy_sql::ViewsKept::All,
            ..Default::default()
        };
        Pipeline::with_options(program, options)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"))
    };
    let mut pipeline = build(workers[0]);
    let schemas = [("t1", schema_t1()), ("t2", schema_t2())];
    let mut model = Model {
        rows: HashMap::new(),
    };
    for step in 0..6 {
        if let Some(&resumed) = workers.get(step / 2).filter(|_| step % 2 == 0 && step > 0) {
            let at = dir.join(format!("checkpoint-{step}"));
            std::fs::create_dir_all(&at).unwrap();
            pipeline.checkpoint(&at).unwrap();
            pipeline = build(resumed);
            pipeline.restore(&at).unwrap_or_else(|e| {
                panic!("seed {seed}, {workers:?} workers, step {step}: {e}\n{text}")
            });
        }
        for (name, schema) in &schemas {
            let current = model.rows.entry(name.to_string()).or_default();
            let count = rng.gen_range(0..6);
            let inserts = random_rows(&mut rng, schema, count);
            // Delete some existing rows (whole batches kept as single rows).
            let mut deletes = Vec::new();
            if step > 0 {
                current.shuffle(&mut rng);
                let n = rng.gen_range(0..=current.len().min(3));
                deletes = match append_only {
                    // Refused: the rows stay.
                    true => current[..n].to_vec(),
                    false => current.drain(..n).collect::<Vec<_>>(),
                };
            }
            let mut parts = vec![ZSet::with_weight(inserts.clone(), 1)];
            parts.extend(deletes.iter().map(|d| ZSet::with_weight(d.clone(), -1)));
            pipeline
                .push(name, ZSet::concat(schema, &parts).unwrap())
                .unwrap();
            for r in 0..inserts.num_rows() {
                current.push(inserts.slice(r, 1));
            }
        }
        pipeline
            .step()
            .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}\n{text}"));
        let tables: HashMap<String, RecordBatch> = schemas
            .iter()
            .map(|(name, schema)| {
                let rows = model.rows.get(*name).cloned().unwrap_or_default();
                let batch = datafusion::arrow::compute::concat_batches(schema, &rows).unwrap();
                (name.to_string(), batch)
            })
            .collect();
        for (i, (q, oracle)) in queries.iter().enumerate() {
            let expected = common::datafusion_rows(&tables, oracle)
                .unwrap_or_else(|e| panic!("oracle: {e}\n{oracle}"));
            let got = pipeline
                .view_contents(&format!("v{i}"))
                .unwrap()
                .expand()
                .unwrap();
            assert_eq!(
                common::sorted_rows(&got),
                common::sorted_rows(&expected),
                "seed {seed}, {workers:?} workers, append-only {append_only}, files {in_files}, step {step}, view v{i}: {q}"
            );
        }
    }
    drop((pipeline, storage));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A number from the environment, or `default`.
fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
fn random_programs_match_datafusion() {
    let cases = env_u64("EDDY_DIFF_CASES", 60);
    let seed = env_u64("EDDY_DIFF_SEED", 1);
    for case in 0..cases {
        run_case(
            seed.wrapping_mul(1_000_003).wrapping_add(case),
            &[1],
            false,
            false,
        );
    }
}

/// The same, with every keyed operator split over three workers.
#[test]
fn random_programs_match_datafusion_with_workers() {
    for case in 0..env_u64("EDDY_DIFF_CASES", 60) {
        run_case(7_000_001u64.wrapping_add(case), &[3], false, false);
    }
}

/// The same over append-only tables, sent deletions that they refuse
/// (one worker, then three).
#[test]
fn random_programs_over_append_only_tables_match_datafusion() {
    for case in 0..env_u64("EDDY_DIFF_CASES", 60) {
        run_case(
            9_000_001u64.wrapping_add(case),
            &[1 + 2 * (case as usize % 2)],
            true,
            false,
        );
    }
}

/// The same, checkpointed before steps 2 and 4 and resumed each time with
/// another number of workers, so that every keyed operator's state is
/// split anew (between one worker and several, and between several);
/// every other case keeps its traces in files, which a re-split reads.
#[test]
fn random_programs_match_datafusion_across_worker_changes() {
    let schedules: [&[usize]; 3] = [&[3, 1, 2], &[1, 3, 2], &[2, 4, 3]];
    for case in 0..env_u64("EDDY_DIFF_CASES", 60) {
        run_case(
            13_000_001u64.wrapping_add(case),
            schedules[case as usize % 3],
            case % 4 == 3,
            case % 2 == 1,
        );
    }
}
