//! Worker scaling of the circuit alone: the rows of every step are built
//! before the clock starts, so no generator or parser shares the cores
//! with the workers (Nexmark's generator does). Each shape (a join, a
//! grouped aggregate, both) runs over the same bids with 1 worker and then
//! with each count given; the figure is bids per second from the first
//! bid step to the last, and the ratio to one worker.
//!
//! Run: `cargo bench --workspace --bench workers -- [--bids N] [--step N]
//! [--workers 2,4] [--shape join]` (release profile).

use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use eddy_dbsp::ZSet;
use eddy_sql::{Pipeline, PipelineOptions, Program, ViewsKept};

const TABLES: &str = "
CREATE TABLE auction (id BIGINT, seller BIGINT, category BIGINT);
CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, ts BIGINT);
";

/// The shapes measured: a name and its views.
const SHAPES: &[(&str, &str)] = &[
    (
        "join",
        "CREATE VIEW v AS SELECT b.auction, b.price, a.seller, a.category \
         FROM bid b JOIN auction a ON b.auction = a.id;",
    ),
    (
        "aggregate",
        "CREATE VIEW v AS SELECT bidder, COUNT(*) AS n, SUM(price) AS total, \
         MAX(price) AS top FROM bid GROUP BY bidder;",
    ),
    (
        "join + aggregate",
        "CREATE VIEW v AS SELECT a.category, b.auction, COUNT(*) AS n, \
         MAX(b.price) AS top, SUM(b.price) AS total \
         FROM bid b JOIN auction a ON b.auction = a.id GROUP BY a.category, b.auction;",
    ),
];

/// Auctions: bids go to one of them.
const AUCTIONS: i64 = 100_000;

/// Bidders: groups of the aggregate.
const BIDDERS: i64 = 200_000;

struct Args {
    bids: i64,
    step: i64,
    workers: Vec<usize>,
    /// Only the shapes whose names contain this.
    shape: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        bids: 4_000_000,
        step: 100_000,
        workers: vec![2],
        shape: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--bids" => a.bids = value().parse().expect("--bids N"),
            "--step" => a.step = value().parse().expect("--step N"),
            "--workers" => {
                a.workers = value()
                    .split(',')
                    .map(|w| w.parse().expect("--workers N,M"))
                    .collect()
            }
            "--shape" => a.shape = Some(value()),
            // `cargo bench` passes `--bench`.
            _ => {}
        }
    }
    a
}

/// A number spread over `0..n` by `i` (a multiplicative hash).
fn spread(i: i64, salt: i64, n: i64) -> i64 {
    ((i.wrapping_add(salt) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) as i64 % n
}

fn batch(schema: &SchemaRef, columns: Vec<Int64Array>) -> ZSet {
    let columns = columns.into_iter().map(|c| Arc::new(c) as _).collect();
    ZSet::with_weight(
        RecordBatch::try_new(Arc::clone(schema), columns).unwrap(),
        1,
    )
}

/// Bids per second of `views` over `bids` in steps of `step`, on `workers`.
fn measure(views: &str, workers: usize, a: &Args) -> f64 {
    let program = Program::parse(&format!("{TABLES}{views}")).unwrap();
    let options = PipelineOptions {
        storage: None,
        workers,
        views: ViewsKept::Materialized,
        ..PipelineOptions::default()
    };
    let mut pipeline = Pipeline::with_options(program, options).unwrap();
    let schema = |t: &str| Arc::clone(&pipeline.program().table(t).unwrap().schema);
    let (auction, bid) = (schema("auction"), schema("bid"));
    let ids = 0..AUCTIONS;
    let auctions = batch(
        &auction,
        vec![
            ids.clone().collect(),
            ids.clone().map(|i| spread(i, 1, 50_000)).collect(),
            ids.map(|i| spread(i, 2, 100)).collect(),
        ],
    );
    pipeline.push("auction", auctions).unwrap();
    pipeline.step().unwrap();
    let steps: Vec<ZSet> = (0..a.bids)
        .step_by(a.step as usize)
        .map(|from| {
            let ids = from..(from + a.step).min(a.bids);
            batch(
                &bid,
                vec![
                    ids.clone().map(|i| spread(i, 3, AUCTIONS)).collect(),
                    ids.clone().map(|i| spread(i, 4, BIDDERS)).collect(),
                    ids.clone().map(|i| spread(i, 5, 1_000_000)).collect(),
                    ids.collect(),
                ],
            )
        })
        .collect();
    let started = Instant::now();
    for change in steps {
        pipeline.push("bid", change).unwrap();
        pipeline.step().unwrap();
    }
    a.bids as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let a = args();
    println!(
        "{} bids in steps of {}, {} auctions, {} bidders",
        a.bids, a.step, AUCTIONS, BIDDERS
    );
    println!("| shape | workers | bids/s | ratio to 1 worker |");
    println!("|---|---:|---:|---:|");
    let chosen = |name: &str| a.shape.as_ref().is_none_or(|s| name.contains(s.as_str()));
    for (name, views) in SHAPES.iter().filter(|(name, _)| chosen(name)) {
        let one = measure(views, 1, &a);
        println!("| {name} | 1 | {one:.0} | 1.00 |");
        for &w in &a.workers {
            let rate = measure(views, w, &a);
            println!("| {name} | {w} | {rate:.0} | {:.2} |", rate / one);
        }
    }
}
