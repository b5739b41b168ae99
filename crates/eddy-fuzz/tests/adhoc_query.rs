//! Fuzzing the ad-hoc query path: mutated queries run through
//! `eddy_server::query::run` (read-only, limited in depth, memory and
//! time) over a snapshot of random rows, and their answers are encoded in
//! every format. Errors are fine; a panic (caught by the query task and
//! reported as an internal error), a stack overflow or a hang is not.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use eddy_fuzz::runner::fuzz;
use eddy_fuzz::seeds::Seeds;
use eddy_fuzz::{sql, values};
use eddy_server::query::{self, QueryError, QueryFormat, QueryLimits};
use eddy_server::runner::Rows;
use eddy_sql::{limits, Program};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

struct Case {
    tables: String,
    query: String,
    rows_seed: u64,
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "-- tables (rows seed {}):\n{}\n-- query:\n{}",
            self.rows_seed, self.tables, self.query
        )
    }
}

#[test]
fn adhoc_queries() {
    let mut seeds = Seeds::load(usize::MAX);
    // Snapshots are made of the seed files whose tables Eddy accepts.
    seeds.files.retain(|f| {
        limits::with_stack(limits::SQL_STACK_BYTES, || {
            Program::parse(&f.tables.join(";\n")).is_ok()
        })
    });
    assert!(!seeds.files.is_empty());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let limits = QueryLimits {
        memory_bytes: 256 << 20,
        timeout: Duration::from_secs(30),
        max_text_bytes: 1 << 20,
    };
    fuzz(
        "adhoc_query",
        |rng| {
            let file = seeds.files.choose(rng).unwrap();
            let donor = seeds.files.choose(rng).unwrap();
            let query = file.queries.choose(rng).unwrap();
            let other = donor.queries.choose(rng).unwrap();
            let query = if rng.gen_bool(0.9) {
                sql::mutate(rng, query, other)
            } else {
                query.clone()
            };
            Case {
                tables: file.tables.join(";\n"),
                query,
                rows_seed: rng.gen(),
            }
        },
        |case| {
            let program = limits::with_stack(limits::SQL_STACK_BYTES, || {
                Program::parse(&case.tables).expect("seed tables were checked")
            });
            let mut rng = StdRng::seed_from_u64(case.rows_seed);
            let snapshot = program
                .tables
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let rows = values::rows(&mut rng, &t.schema, 20).expand().unwrap();
                    // Every other table is read when scanned, as a keyed
                    // table's upsert is.
                    let rows = match i % 2 {
                        0 => Rows::Now(rows),
                        _ => Rows::Later(Arc::new(move |sink| {
                            sink(rows.clone());
                            Ok(())
                        })),
                    };
                    (t.name.clone(), Arc::clone(&t.schema), rows)
                })
                .collect();
            match runtime.block_on(query::run(snapshot, case.query.clone(), limits)) {
                Ok((batches, schema)) => {
                    for format in ["text", "json", "csv", "arrow_ipc", "parquet"] {
                        let format = QueryFormat::new(format).unwrap();
                        let _ = query::encode(format, &schema, &batches, limits.memory_bytes);
                    }
                }
                Err(QueryError::Internal(m)) => panic!("internal error: {m}"),
                Err(_) => {}
            }
        },
    );
}
