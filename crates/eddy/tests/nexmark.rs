//! The `nexmark` input connector through a real `eddy serve`: declared in
//! Feldera's form (one connector per table, options on one), run to
//! `pipeline_complete`, and resumed after a kill without losing or
//! repeating an event.

mod common;

use common::{scratch, wait_until, Server};
use serde_json::{json, Value};

/// The three tables with nexmark connectors in Feldera's form (a `csv`
/// format that is not used, `max_batch_size` on `bid`), `options` given on
/// `person`.
fn tables(options: Value) -> String {
    let connector = |table: &str, extra: Value| {
        let mut config = json!({"table": table});
        if !extra.is_null() {
            config["options"] = extra;
        }
        let mut c = json!({
            "format": {"name": "csv", "config": {}},
            "transport": {"name": "nexmark", "config": config},
        });
        if table == "bid" {
            c["max_batch_size"] = json!(160000);
        }
        json!([c]).to_string()
    };
    format!(
        "CREATE TABLE person (
            id BIGINT, name VARCHAR, emailAddress VARCHAR, creditCard VARCHAR,
            city VARCHAR, state VARCHAR,
            date_time TIMESTAMP(3) NOT NULL LATENESS INTERVAL 4 SECONDS, extra VARCHAR
         ) WITH ('connectors' = '{}');
         CREATE TABLE auction (
            id BIGINT, itemName VARCHAR, description VARCHAR, initialBid BIGINT,
            reserve BIGINT, date_time TIMESTAMP(3) NOT NULL LATENESS INTERVAL 4 SECONDS,
            expires TIMESTAMP(3), seller BIGINT, category BIGINT, extra VARCHAR
         ) WITH ('connectors' = '{}');
         CREATE TABLE bid (
            auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
            date_time TIMESTAMP(3) NOT NULL LATENESS INTERVAL 4 SECONDS, extra VARCHAR
         ) WITH ('connectors' = '{}');",
        connector("person", options),
        connector("auction", Value::Null),
        connector("bid", Value::Null),
    )
}

/// Counts that show every event arrived once.
const COUNTS: &str = "
CREATE MATERIALIZED VIEW people AS
  SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS d, MIN(id) AS lo, MAX(id) AS hi FROM person;
CREATE MATERIALIZED VIEW auctions AS
  SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS d, MAX(id) AS hi FROM auction;
CREATE MATERIALIZED VIEW bids AS
  SELECT COUNT(*) AS n, COUNT(DISTINCT date_time) AS d, SUM(price) AS s FROM bid;
CREATE MATERIALIZED VIEW q3 AS
  SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
  WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA');";

fn complete(s: &Server, name: &str) -> bool {
    s.ok("GET", &format!("/v0/pipelines/{name}/stats"), None)["global_metrics"]["pipeline_complete"]
        == true
}

fn counts(s: &Server, name: &str) -> (Value, Value, Value) {
    let one = |view: &str| s.query(name, &format!("SELECT * FROM {view}"))[0].clone();
    (one("people"), one("auctions"), one("bids"))
}

#[test]
fn generated_events_reach_the_three_tables_in_their_proportions() {
    let dir = scratch("nexmark-complete");
    let s = Server::start(&dir, None);
    let sql = format!(
        "{}{COUNTS}",
        tables(json!({"events": 50_000, "threads": 3, "batch_size_per_thread": 700}))
    );
    s.deploy("n", &sql);
    s.ok("POST", "/v0/pipelines/n/start", None);
    wait_until("pipeline_complete", || complete(&s, "n"));
    let (people, auctions, bids) = counts(&s, "n");
    assert_eq!(
        people,
        json!({"n": 1000, "d": 1000, "lo": 1000, "hi": 1999})
    );
    assert_eq!(auctions, json!({"n": 3000, "d": 3000, "hi": 3999}));
    assert_eq!(bids["n"], 46_000);
    assert_eq!(bids["d"], 46_000, "one bid per event time");
    let stats = s.ok("GET", "/v0/pipelines/n/stats", None);
    let inputs = stats["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 3, "{stats}");
    for i in inputs {
        assert_eq!(i["metrics"]["end_of_input"], true, "{i}");
    }
    assert!(!s.query("n", "SELECT * FROM q3").is_empty());
    // The same events with one thread: the same sums.
    s.ok("POST", "/v0/pipelines/n/stop?force=true", None);
    wait_until("stopped", || {
        s.ok("GET", "/v0/pipelines/n", None)["deployment_status"] == "Stopped"
    });
    s.ok("POST", "/v0/pipelines/n/clear", None);
    let one_thread = format!(
        "{}{COUNTS}",
        tables(json!({"events": 50_000, "threads": 1}))
    );
    s.deploy("n", &one_thread);
    s.ok("POST", "/v0/pipelines/n/start", None);
    wait_until("pipeline_complete", || complete(&s, "n"));
    assert_eq!(counts(&s, "n").2, bids);
}

#[test]
fn a_program_with_a_missing_or_doubled_nexmark_table_is_refused() {
    let dir = scratch("nexmark-refused");
    let s = Server::start(&dir, None);
    let only_two =
        tables(json!({"events": 10})).replace(r#""table":"bid""#, r#""table":"auction""#);
    assert_ne!(only_two, tables(json!({"events": 10})));
    s.deploy_refused(
        "bad",
        &only_two,
        "more than one nexmark connector for auction",
    );
}

#[test]
fn a_resumed_generator_neither_loses_nor_repeats_an_event() {
    let dir = scratch("nexmark-resume");
    let data = dir.join("data");
    let mut s = Server::start_with(&data, None, &[]);
    let events = 60_000;
    let sql = format!(
        "{}{COUNTS}",
        tables(
            json!({"events": events, "threads": 2, "batch_size_per_thread": 500, "rate": 15_000})
        )
    );
    let body = json!({
        "program_code": sql,
        "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 1}},
    });
    s.ok("PUT", "/v0/pipelines/r", Some(&body.to_string()));
    s.ok("POST", "/v0/pipelines/r/start", None);
    // Killed once a checkpoint holds part of the events.
    wait_until("a checkpoint with some events", || {
        let status = s.ok("GET", "/v0/pipelines/r/checkpoint_status", None);
        status["success"].as_u64().is_some_and(|n| n >= 2)
    });
    let before = counts(&s, "r").2["n"].as_i64().unwrap_or(0);
    assert!(before < events * 46 / 50, "not yet complete: {before}");
    drop(s);
    s = Server::start_with(&data, None, &[]);
    wait_until("pipeline_complete after the restart", || complete(&s, "r"));
    let p = s.ok("GET", "/v0/pipelines/r", None);
    assert!(p["checkpoint_resumed"].as_u64().unwrap_or(0) >= 1, "{p}");
    let (people, auctions, bids) = counts(&s, "r");
    assert_eq!(
        people,
        json!({"n": 1200, "d": 1200, "lo": 1000, "hi": 2199})
    );
    assert_eq!(auctions, json!({"n": 3600, "d": 3600, "hi": 4599}));
    assert_eq!(bids["n"], 55_200);
    assert_eq!(bids["d"], 55_200);
}
