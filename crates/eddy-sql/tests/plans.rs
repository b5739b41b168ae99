//! Which operators a query becomes: the shapes that have a cheaper
//! incremental form must get it.

use eddy_sql::{Pipeline, Program};

fn operators(view: &str) -> Vec<String> {
    operators_of(&format!(
        "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP);\n\
         CREATE VIEW v AS {view};"
    ))
}

fn operators_of(text: &str) -> Vec<String> {
    let p = Pipeline::new(Program::parse(text).unwrap_or_else(|e| panic!("{e}"))).unwrap();
    p.circuit()
        .describe()
        .into_iter()
        .map(|l| l.split_whitespace().nth(1).unwrap_or("").to_string())
        .collect()
}

#[test]
fn filters_on_ranking_functions_become_per_partition_top_k() {
    for view in [
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number FROM bid) WHERE rank_number <= 10",
        "SELECT auction, price FROM (SELECT auction, price, RANK() OVER (PARTITION BY auction ORDER BY price) AS r FROM bid) AS x WHERE r < 3 AND price > 5",
        "SELECT * FROM bid QUALIFY DENSE_RANK() OVER (PARTITION BY bidder ORDER BY ts DESC) = 1",
        "SELECT auction, bidder FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY ts DESC) AS n FROM bid) WHERE 1 >= n",
    ] {
        let ops = operators(view);
        assert!(ops.iter().any(|o| o == "rank_topk"), "{view}: {ops:?}");
        assert!(!ops.iter().any(|o| o == "window"), "{view}: {ops:?}");
    }
    // Without a bound it is a window.
    let ops = operators(
        "SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price) AS n FROM bid",
    );
    assert!(ops.iter().any(|o| o == "window"), "{ops:?}");
}

#[test]
fn top_k_over_append_only_inputs_keeps_only_the_first_rows() {
    let tables = "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP) \
                  WITH ('append_only' = 'true');\n\
                  CREATE TABLE auction (id BIGINT, seller BIGINT) WITH ('append_only' = 'true');\n\
                  CREATE TABLE person (id BIGINT PRIMARY KEY, name VARCHAR) WITH ('append_only' = 'true');\n\
                  CREATE TABLE open (id BIGINT);\n";
    let top = |from: &str| {
        format!(
            "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY x DESC) AS n FROM ({from})) WHERE n <= 3"
        )
    };
    // Insertions only: an append-only table, filtered and projected,
    // joined (inner) with another, unioned, or through a view.
    for from in [
        "SELECT auction AS k, price AS x FROM bid WHERE price > 10".to_string(),
        "SELECT a.seller AS k, b.price AS x FROM auction a JOIN bid b ON a.id = b.auction"
            .to_string(),
        "SELECT auction AS k, price AS x FROM bid UNION ALL SELECT id, seller FROM auction"
            .to_string(),
        "SELECT auction AS k, price AS x FROM cheap".to_string(),
    ] {
        let text = format!(
            "{tables}CREATE VIEW cheap AS SELECT * FROM bid WHERE price < 5;\nCREATE VIEW v AS {};",
            top(&from)
        );
        let ops = operators_of(&text);
        assert!(
            ops.iter().any(|o| o == "rank_topk_inserts"),
            "{from}: {ops:?}"
        );
        assert!(ops.iter().any(|o| o == "append_only"), "{from}: {ops:?}");
    }
    // What may retract: a table that is not append-only, one with a
    // primary key (an upsert), an outer join, an aggregate, DISTINCT, an
    // ASOF join (a closer right row replaces a match).
    for from in [
        "SELECT id AS k, id AS x FROM open".to_string(),
        "SELECT id AS k, id AS x FROM person".to_string(),
        "SELECT a.seller AS k, b.price AS x FROM auction a LEFT JOIN bid b ON a.id = b.auction"
            .to_string(),
        "SELECT auction AS k, SUM(price) AS x FROM bid GROUP BY auction".to_string(),
        "SELECT DISTINCT auction AS k, price AS x FROM bid".to_string(),
        "SELECT b.auction AS k, c.price AS x FROM bid b ASOF JOIN bid c \
         MATCH_CONDITION (b.ts >= c.ts) ON b.auction = c.auction"
            .to_string(),
    ] {
        let ops = operators_of(&format!("{tables}CREATE VIEW v AS {};", top(&from)));
        assert!(ops.iter().any(|o| o == "rank_topk"), "{from}: {ops:?}");
        assert!(
            !ops.iter().any(|o| o == "rank_topk_inserts"),
            "{from}: {ops:?}"
        );
    }
}

#[test]
fn top_k_over_rising_counts_keeps_only_the_first_rows() {
    let tables = "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP) \
                  WITH ('append_only' = 'true');\n\
                  CREATE TABLE open (auction BIGINT, bidder BIGINT, price BIGINT);\n";
    let top = |ranking: &str, order: &str, from: &str| {
        format!(
            "SELECT * FROM (SELECT *, {ranking}() OVER (PARTITION BY k ORDER BY {order}) AS n FROM ({from})) WHERE n <= 3"
        )
    };
    let count = "SELECT auction AS k, bidder, COUNT(*) AS x, MAX(price) AS m FROM bid GROUP BY auction, bidder";
    // Counts that rise with every change of their group, ranked highest
    // first within partitions of the group's columns.
    for view in [
        top("ROW_NUMBER", "x DESC", count),
        top("RANK", "x DESC, bidder", count),
        top("RANK", "x DESC", "SELECT auction AS k, COUNT(price) AS x FROM bid GROUP BY auction, bidder"),
        top("ROW_NUMBER", "x DESC", "SELECT auction AS k, COUNT(*) AS x FROM bid WHERE price > 3 GROUP BY auction"),
        // Nexmark's q5: an argmax join of the counts per window.
        "WITH c AS (SELECT auction, bidder AS w, COUNT(*) AS num FROM bid GROUP BY auction, bidder), \
         m AS (SELECT w, MAX(num) AS top FROM c GROUP BY w) \
         SELECT c.auction, c.num FROM c JOIN m ON c.w = m.w WHERE c.num >= m.top"
            .to_string(),
    ] {
        let ops = operators_of(&format!("{tables}CREATE VIEW v AS {view};"));
        assert!(ops.iter().any(|o| o == "rank_topk_rising"), "{view}: {ops:?}");
    }
    // A count that may fall (not append-only), one that may stay while
    // its row changes (`COUNT(x)` beside another aggregate), lowest first,
    // partitions across groups' counts, dense ranks, and a filter on the
    // count keep every row.
    for view in [
        top("ROW_NUMBER", "x DESC", "SELECT auction AS k, COUNT(*) AS x FROM open GROUP BY auction"),
        top("ROW_NUMBER", "x DESC", "SELECT auction AS k, COUNT(price) AS x, MAX(bidder) AS m FROM bid GROUP BY auction, bidder"),
        top("ROW_NUMBER", "x", count),
        top("ROW_NUMBER", "x DESC", "SELECT m AS k, x FROM (SELECT auction, COUNT(*) AS x, MAX(price) AS m FROM bid GROUP BY auction)"),
        top("DENSE_RANK", "x DESC", count),
        top("ROW_NUMBER", "x DESC", "SELECT auction AS k, COUNT(*) AS x FROM bid GROUP BY auction HAVING COUNT(*) < 5"),
    ] {
        let ops = operators_of(&format!("{tables}CREATE VIEW v AS {view};"));
        assert!(ops.iter().any(|o| o == "rank_topk"), "{view}: {ops:?}");
    }
}

#[test]
fn argmax_joins_become_per_group_top_k() {
    // Nexmark's q5 shape, and a plain one with the sides swapped.
    for view in [
        "WITH counts AS (SELECT auction, bidder, COUNT(*) AS num FROM bid GROUP BY auction, bidder), \
              most AS (SELECT bidder, MAX(num) AS m FROM counts GROUP BY bidder) \
         SELECT c.auction, c.num FROM counts c JOIN most ON c.bidder = most.bidder WHERE c.num >= most.m",
        "SELECT b.auction FROM (SELECT auction, MAX(price) AS top FROM bid GROUP BY auction) t \
         JOIN bid b ON t.auction = b.auction WHERE t.top <= b.price",
        // An inner join that keeps the group's columns too.
        "SELECT b.bidder, t.auction, t.top FROM (SELECT auction, MAX(price) AS top FROM bid GROUP BY auction) t \
         JOIN bid b ON t.auction = b.auction AND t.top = b.price",
    ] {
        let ops = operators(view);
        assert!(ops.iter().any(|o| o == "rank_topk"), "{view}: {ops:?}");
        assert!(!ops.iter().any(|o| o == "join"), "{view}: {ops:?}");
    }
    // The maximum of another column, or of a filtered side, stays a join.
    for view in [
        "SELECT b.auction FROM bid b JOIN (SELECT auction, MAX(bidder) AS top FROM bid GROUP BY auction) t \
         ON b.auction = t.auction WHERE b.price >= t.top",
        "SELECT b.auction FROM bid b JOIN (SELECT auction, MAX(price) AS top FROM bid WHERE price > 3 GROUP BY auction) t \
         ON b.auction = t.auction WHERE b.price >= t.top",
    ] {
        let ops = operators(view);
        assert!(ops.iter().any(|o| o == "join"), "{view}: {ops:?}");
        assert!(!ops.iter().any(|o| o == "rank_topk"), "{view}: {ops:?}");
    }
}

#[test]
fn asof_joins_and_lateness_have_their_operators() {
    let text = "CREATE TABLE l (k BIGINT, ts BIGINT NOT NULL LATENESS 5);\n\
                CREATE TABLE r (k BIGINT, ts BIGINT, v BIGINT);\n\
                CREATE VIEW v AS SELECT l.k, r.v FROM l LEFT ASOF JOIN r MATCH_CONDITION (l.ts >= r.ts) ON l.k = r.k;";
    let p = Pipeline::new(Program::parse(text).unwrap()).unwrap();
    let ops = p.circuit().describe().join("\n");
    assert!(ops.contains("asof_join"), "{ops}");
    assert!(ops.contains("lateness"), "{ops}");
    assert!(!ops.contains(" join "), "{ops}");
}

#[test]
fn keyed_operators_are_split_over_workers() {
    let text = "CREATE TABLE p (id BIGINT PRIMARY KEY, name VARCHAR);\n\
                CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT);\n\
                CREATE VIEW j AS SELECT p.name, b.price FROM p JOIN bid b ON p.id = b.bidder;\n\
                CREATE VIEW g AS SELECT auction, COUNT(*) AS n, MAX(price) AS m FROM bid GROUP BY auction;\n\
                CREATE VIEW t AS SELECT MAX(price) AS m FROM bid;\n\
                CREATE VIEW d AS SELECT bidder FROM bid INTERSECT SELECT id FROM p;\n\
                CREATE VIEW w AS SELECT auction, price, SUM(price) OVER (PARTITION BY auction ORDER BY price) AS s FROM bid;\n\
                CREATE VIEW c AS SELECT * FROM p, bid;";
    let options = eddy_sql::PipelineOptions {
        storage: None,
        workers: 4,
        views: eddy_sql::ViewsKept::All,
        ..Default::default()
    };
    let p = Pipeline::with_options(Program::parse(text).unwrap(), options).unwrap();
    let ops: Vec<String> = p
        .circuit()
        .describe()
        .into_iter()
        .map(|l| l.split_whitespace().nth(1).unwrap_or("").to_string())
        .collect();
    for sharded in [
        "upsert×4",
        "join×4",
        "aggregate×4",
        "distinct×4",
        "window×4",
    ] {
        assert!(ops.iter().any(|o| o == sharded), "{sharded}: {ops:?}");
    }
    // An aggregate without GROUP BY and a cross product see every row.
    assert!(ops.iter().any(|o| o == "aggregate"), "{ops:?}");
    assert!(ops.iter().any(|o| o == "join"), "{ops:?}");
}

#[test]
fn a_subplan_read_twice_is_computed_once_unless_volatile() {
    let text = "CREATE TABLE t (k BIGINT, v BIGINT);\n\
                CREATE VIEW hot AS WITH c AS (SELECT k, COUNT(*) AS n FROM t GROUP BY k)\n\
                  SELECT a.k, a.n FROM c AS a JOIN (SELECT MAX(n) AS m FROM c) AS b ON a.n >= b.m;\n\
                CREATE VIEW draws AS WITH r AS (SELECT k, random() AS x FROM t)\n\
                  SELECT a.k FROM r AS a JOIN r AS b ON a.k = b.k AND a.x < b.x;";
    let p = Pipeline::new(Program::parse(text).unwrap()).unwrap();
    let ops = p.circuit().describe();
    let grouped = ops.iter().filter(|l| l.contains(" aggregate ")).count();
    // COUNT per k once (shared by both sides), MAX once.
    assert_eq!(grouped, 2, "{ops:#?}");
    // Each side of the self-join of random draws has a map of its own.
    let randoms = ops.iter().filter(|l| l.contains(" map ")).count();
    assert!(randoms >= 2, "{ops:#?}");
    let join = ops.iter().rfind(|l| l.contains(" join ")).expect("a join");
    let inputs = &join[join.find('[').unwrap()..];
    let ids: Vec<&str> = inputs
        .trim_matches(|c| c == '[' || c == ']')
        .split(", ")
        .collect();
    assert_ne!(ids[0], ids[1], "{ops:#?}");
}

#[test]
fn hop_windows_are_a_product_with_their_numbers_not_a_join() {
    let ops = operators(
        "SELECT auction, window_start, window_end, COUNT(*) AS n \
         FROM TABLE(HOP(TABLE bid, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) \
         GROUP BY auction, window_start, window_end",
    );
    assert!(ops.iter().any(|o| o == "product"), "{ops:?}");
    assert!(!ops.iter().any(|o| o.starts_with("join")), "{ops:?}");
    // A cross join of two tables stays a join.
    let ops = operators("SELECT a.auction, b.bidder FROM bid a CROSS JOIN bid b");
    assert!(ops.iter().any(|o| o.starts_with("join")), "{ops:?}");
    assert!(!ops.iter().any(|o| o == "product"), "{ops:?}");
}

/// `AVG` of integers keeps running sums, not the group's rows: 2,000 rows
/// in 10 groups leave a few entries per group, and the averages are exact,
/// of the argument's type under Feldera's rules and DOUBLE under
/// PostgreSQL's (where the planner averages `CAST(price AS DOUBLE)`).
#[test]
fn averages_of_integers_keep_sums_not_rows() {
    use std::sync::Arc;

    use datafusion::arrow::array::{Array, Float64Array, Int32Array, Int64Array, RecordBatch};
    use eddy_dbsp::ZSet;
    use eddy_sql::Rules;

    for rules in [Rules::Feldera, Rules::Postgres] {
        // Prices as INT: the Feldera average is an INT as well.
        let text = "CREATE TABLE bid (auction BIGINT, price INT);\n\
                    CREATE VIEW v AS SELECT auction, COUNT(*) AS n, AVG(price) AS mean FROM bid GROUP BY auction;";
        let mut p = Pipeline::new(Program::parse_with(text, rules).unwrap()).unwrap();
        let schema = Arc::clone(&p.program().table("bid").unwrap().schema);
        for step in 0..4i64 {
            let ids = step * 500..(step + 1) * 500;
            let auction: Int64Array = ids.clone().map(|i| i % 10).collect();
            let price: Int32Array = ids.map(|i| (i * 3 + i % 2) as i32).collect();
            let batch = RecordBatch::try_new(
                Arc::clone(&schema),
                vec![Arc::new(auction), Arc::new(price)],
            )
            .unwrap();
            p.push("bid", ZSet::with_weight(batch, 1)).unwrap();
            p.step().unwrap();
        }
        assert!(p.state_entries() < 100, "{} entries", p.state_entries());
        let rows = p.view_rows("v").unwrap();
        let auction = rows
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(rows.num_rows(), 10);
        for i in 0..rows.num_rows() {
            // Auction a has prices 3 * (a + 10 j) + a % 2, j < 200: mean
            // 3 * (a + 995) + a % 2, exactly.
            let a = auction.value(i);
            let exact = 3 * (a + 995) + a % 2;
            let mean = rows.column(2);
            assert!(mean.is_valid(i));
            match rules {
                Rules::Feldera => {
                    let mean = mean.as_any().downcast_ref::<Int32Array>().unwrap();
                    assert_eq!(i64::from(mean.value(i)), exact);
                }
                Rules::Postgres => {
                    let mean = mean.as_any().downcast_ref::<Float64Array>().unwrap();
                    assert_eq!(mean.value(i), exact as f64);
                }
            }
        }
    }
}

/// An ASOF join's traces keep only the columns the query reads: a wide
/// column of the left table that nothing selects is projected away below
/// the join, and the view is still right.
#[test]
fn asof_join_traces_keep_only_the_columns_read() {
    use std::sync::Arc;

    use datafusion::arrow::array::{Array, Int64Array, RecordBatch, StringArray};
    use eddy_dbsp::ZSet;

    let text = "CREATE TABLE l (k BIGINT, ts BIGINT, pad VARCHAR);\n\
                CREATE TABLE r (k BIGINT, ts BIGINT, v BIGINT);\n\
                CREATE VIEW v AS SELECT l.k, l.ts, r.v FROM l LEFT ASOF JOIN r MATCH_CONDITION (l.ts >= r.ts) ON l.k = r.k;";
    let mut p = Pipeline::new(Program::parse(text).unwrap()).unwrap();
    let (ls, rs) = (
        Arc::clone(&p.program().table("l").unwrap().schema),
        Arc::clone(&p.program().table("r").unwrap().schema),
    );
    let ints = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as Arc<dyn Array>;
    let right = RecordBatch::try_new(
        rs,
        vec![ints(vec![1, 1]), ints(vec![0, 50]), ints(vec![10, 20])],
    )
    .unwrap();
    p.push("r", ZSet::with_weight(right, 1)).unwrap();
    let n = 1000i64;
    let pad: StringArray = (0..n).map(|_| Some("x".repeat(500))).collect();
    let left = RecordBatch::try_new(
        ls,
        vec![
            ints(vec![1; n as usize]),
            ints((0..n).collect()),
            Arc::new(pad),
        ],
    )
    .unwrap();
    p.push("l", ZSet::with_weight(left, 1)).unwrap();
    p.step().unwrap();
    let asof = p
        .operator_states()
        .into_iter()
        .find(|s| s.operator == "asof_join")
        .expect("an ASOF join");
    // 1,000 left rows of about 20 bytes each, not 500 more for the pad.
    assert!(asof.bytes < 100 * n as usize, "{asof:?}");
    let rows = p.view_rows("v").unwrap();
    let v = rows
        .column(2)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    let late = v.iter().filter(|x| *x == Some(20)).count();
    assert_eq!((rows.num_rows(), late), (1000, 950));
}

/// A table's columns that no scan names (projected or filtered), outside
/// its primary key, of a table not kept for reading: the pipeline drops
/// their values on arrival. Only variable-width columns are dropped.
#[test]
fn columns_nothing_reads_are_known_and_dropped() {
    let text = "CREATE TABLE t (id BIGINT, name VARCHAR, note VARCHAR, tag VARCHAR, body VARCHAR, n BIGINT);\n\
                CREATE TABLE k (id VARCHAR PRIMARY KEY, a VARCHAR, b VARCHAR);\n\
                CREATE TABLE m (id BIGINT, a VARCHAR) WITH ('materialized' = 'true');\n\
                CREATE TABLE s (id BIGINT, a VARCHAR);\n\
                CREATE TABLE u (id BIGINT, a VARCHAR, b VARCHAR);\n\
                CREATE TABLE idle (id BIGINT, a VARCHAR);\n\
                CREATE VIEW v1 AS SELECT id, name FROM t WHERE tag = 'x';\n\
                CREATE VIEW v2 AS SELECT COUNT(*) AS c FROM k;\n\
                CREATE VIEW v3 AS SELECT * FROM s;\n\
                CREATE VIEW v4 AS SELECT id FROM m;\n\
                CREATE VIEW v5 AS SELECT id FROM s WHERE id IN (SELECT id FROM u WHERE u.a = 'z');";
    let mut p = Pipeline::new(Program::parse(text).unwrap()).unwrap();
    let unread = std::sync::Arc::clone(p.unread_columns());
    // note and body (tag is filtered on, n is fixed-width).
    assert_eq!(unread.columns("t"), &[2, 4]);
    // A table with a primary key keeps its rows in its upsert (a view
    // added later may read them): nothing is dropped.
    assert_eq!(unread.columns("k"), &[] as &[usize]);
    assert_eq!(unread.columns("m"), &[] as &[usize]);
    assert_eq!(unread.columns("s"), &[] as &[usize]);
    // Read in a subquery's filter.
    assert_eq!(unread.columns("u"), &[2]);
    assert_eq!(unread.columns("idle"), &[1]);
    assert_eq!(unread.columns("nothing"), &[] as &[usize]);

    use datafusion::arrow::array::{Array, Int64Array, RecordBatch, StringArray};
    let schema = std::sync::Arc::clone(&p.program().table("t").unwrap().schema);
    let strings = |v: [&str; 2]| std::sync::Arc::new(StringArray::from(v.to_vec()));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            std::sync::Arc::new(Int64Array::from(vec![1, 2])),
            strings(["one", "two"]),
            strings(["a note", "another"]),
            strings(["x", "y"]),
            strings(["a body", "another"]),
            std::sync::Arc::new(Int64Array::from(vec![7, 8])),
        ],
    )
    .unwrap();
    let change = eddy_dbsp::ZSet::with_weight(batch.clone(), 1);
    let thin = unread.drop_from("t", change).unwrap();
    for (i, column) in thin.batch().columns().iter().enumerate() {
        match i {
            2 | 4 => assert_eq!(column.null_count(), 2),
            _ => assert_eq!(column.as_ref(), batch.column(i).as_ref()),
        }
    }
    // Dropping again changes nothing.
    let again = unread.drop_from("t", thin.clone()).unwrap();
    assert_eq!(again.batch(), thin.batch());
    // The view reads what it reads.
    p.push("t", eddy_dbsp::ZSet::with_weight(batch, 1)).unwrap();
    p.step().unwrap();
    let rows = p.view_rows("v1").unwrap();
    assert_eq!(rows.num_rows(), 1);
    let names = rows
        .column(1)
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    assert_eq!(names.value(0), "one");
}

#[test]
fn session_windows_are_one_window_and_refuse_gaps_they_cannot_count() {
    for view in [
        "SELECT bidder, COUNT(*) AS n, SESSION_START(ts, INTERVAL '10' SECOND) AS s FROM bid \
         GROUP BY bidder, SESSION(ts, INTERVAL '10' SECOND)",
        "SELECT * FROM TABLE(SESSION(TABLE bid, DESCRIPTOR(auction), DESCRIPTOR(bidder), 5))",
    ] {
        let ops = operators(view);
        let windows = ops.iter().filter(|o| *o == "window").count();
        assert_eq!(windows, 1, "{view}: {ops:?}");
    }
    for (gap, why) in [
        ("INTERVAL '1' MONTH", "months"),
        ("INTERVAL '0' SECOND", "must be positive"),
        ("INTERVAL '1' MILLISECOND", "finer than"),
        ("INTERVAL '1000000' DAY", "out of range"),
    ] {
        let text = format!(
            "CREATE TABLE bid (bidder BIGINT, ts TIMESTAMP(0));\n\
             CREATE VIEW v AS SELECT bidder, COUNT(*) AS n FROM bid GROUP BY bidder, SESSION(ts, {gap});"
        );
        let built = Program::parse(&text)
            .map_err(|e| e.to_string())
            .and_then(|p| Pipeline::new(p).map(|_| ()).map_err(|e| e.to_string()));
        let error = built.expect_err(gap);
        assert!(error.contains(why), "{gap}: {error}");
    }
    let text = "CREATE TABLE bid (bidder BIGINT, ts TIMESTAMP);\n\
                CREATE VIEW v AS SELECT bidder, session_start(ts, CASE WHEN bidder > 0 \
                THEN INTERVAL '1' SECOND ELSE INTERVAL '2' SECOND END) \
                OVER (PARTITION BY bidder ORDER BY ts) AS s FROM bid;";
    let built = Program::parse(text)
        .map_err(|e| e.to_string())
        .and_then(|p| Pipeline::new(p).map(|_| ()).map_err(|e| e.to_string()));
    let error = built.expect_err("a gap that is not a constant");
    assert!(error.contains("constant"), "{error}");
}
