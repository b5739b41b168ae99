//! Memory of an unbounded stream with LATENESS: Nexmark-shaped bids (event
//! time advancing, a hot set of auctions, many bidders, some bids up to 4
//! seconds out of order) feed windowed aggregates, a join on the window
//! and a final-only view. With waterlines, operators forget closed windows,
//! so the state and the process's memory stay flat however long it runs.
//!
//! Run: `cargo bench -p eddy-benches --bench lateness_memory`
//! (`EDDY_BENCH_EVENTS`, default 50,000,000; `EDDY_BENCH_NO_LATENESS=1` runs
//! the same program without LATENESS, for contrast).

use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
use eddy_dbsp::ZSet;
use eddy_sql::{Pipeline, Program};

const VIEWS: &str = "
CREATE VIEW per_window AS
  SELECT window_start, COUNT(*) AS bids, MAX(price) AS top
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
  GROUP BY window_start;
CREATE VIEW hot AS
  WITH per AS (
    SELECT auction, window_start, COUNT(*) AS n
    FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
    GROUP BY auction, window_start)
  SELECT p.window_start, p.auction, p.n FROM per p
  JOIN (SELECT window_start, MAX(n) AS m FROM per GROUP BY window_start) x
    ON p.window_start = x.window_start AND p.n = x.m;
CREATE VIEW bidders AS
  SELECT window_start, COUNT(DISTINCT bidder) AS bidders
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
  GROUP BY window_start;
";

const FINAL: &str = "
CREATE VIEW closed WITH ('emit_final' = 'window_start') AS
  SELECT window_start, COUNT(*) AS bids, SUM(price) AS volume
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
  GROUP BY window_start;
";

/// Events per step.
const BATCH: u64 = 100_000;
/// Event time between two events, in microseconds (10,000 events/s).
const GAP_MICROS: u64 = 100;

fn rss_mib() -> f64 {
    eddy_server::stats::rss_bytes() as f64 / (1024.0 * 1024.0)
}

/// A small, fast generator (xorshift), so the run repeats exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn main() {
    let events: u64 = std::env::var("EDDY_BENCH_EVENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50_000_000);
    let lateness = std::env::var("EDDY_BENCH_NO_LATENESS").is_err();
    let table = format!(
        "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, \
         date_time TIMESTAMP(3) NOT NULL {});",
        if lateness {
            "LATENESS INTERVAL 4 SECONDS"
        } else {
            ""
        }
    );
    let program = format!("{table}{VIEWS}{}", if lateness { FINAL } else { "" });
    let mut pipeline = Pipeline::new(Program::parse(&program).unwrap()).unwrap();
    let schema = Arc::clone(pipeline.input("bid").unwrap().schema());
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let base_ms: i64 = 1_700_000_000_000;
    let start = Instant::now();
    println!("lateness: {lateness}; events, seconds, events/s, state entries, RSS MiB");
    let mut n = 0u64;
    while n < events {
        let count = BATCH.min(events - n);
        let (mut auction, mut bidder, mut price, mut ts) = (
            Vec::with_capacity(count as usize),
            Vec::with_capacity(count as usize),
            Vec::with_capacity(count as usize),
            Vec::with_capacity(count as usize),
        );
        for i in n..n + count {
            let r = rng.next();
            let now_ms = (i * GAP_MICROS / 1000) as i64;
            // The newest 1,000 auctions, one new every 100 events.
            let newest = (i / 100) as i64;
            auction.push(newest - (r % 1000) as i64);
            bidder.push(((r >> 10) % 100_000) as i64);
            price.push(((r >> 30) % 10_000) as i64 + 1);
            // One bid in ten is up to 3.5 seconds late (within the lateness).
            let delay = if (r >> 50).is_multiple_of(10) {
                ((r >> 54) % 3500) as i64
            } else {
                0
            };
            ts.push(base_ms + now_ms - delay);
        }
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from(auction)),
                Arc::new(Int64Array::from(bidder)),
                Arc::new(Int64Array::from(price)),
                Arc::new(TimestampMillisecondArray::from(ts)),
            ],
        )
        .unwrap();
        pipeline.push("bid", ZSet::with_weight(batch, 1)).unwrap();
        pipeline.step().unwrap();
        n += count;
        if n.is_multiple_of(5_000_000) || n == events {
            let secs = start.elapsed().as_secs_f64();
            println!(
                "{n}, {secs:.1}, {:.0}, {}, {:.0}",
                n as f64 / secs,
                pipeline.state_entries(),
                rss_mib()
            );
        }
    }
}
