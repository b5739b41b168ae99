use eddy_fuzz::values;
use eddy_server::query::{self, QueryLimits};
use eddy_sql::{limits, Program};
use rand::{rngs::StdRng, SeedableRng};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn repro() {
    let text = std::fs::read_to_string("/tmp/repro/case.txt").unwrap();
    let seed: u64 = text
        .lines()
        .next()
        .unwrap()
        .split("rows seed ")
        .nth(1)
        .unwrap()
        .trim_end_matches("):")
        .parse()
        .unwrap();
    let tables = text
        .split("-- query:\n")
        .next()
        .unwrap()
        .splitn(2, '\n')
        .nth(1)
        .unwrap()
        .to_string();
    let sql = text.split("-- query:\n").nth(1).unwrap().to_string();
    let program = limits::with_stack(limits::SQL_STACK_BYTES, || Program::parse(&tables).unwrap());
    let mut rng = StdRng::seed_from_u64(seed);
    let snapshot = program
        .tables
        .iter()
        .map(|t| {
            let rows = values::rows(&mut rng, &t.schema, 20).expand().unwrap();
            (t.name.clone(), Arc::clone(&t.schema), rows)
        })
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let start = Instant::now();
    let r = rt.block_on(query::run(
        snapshot,
        sql.clone(),
        QueryLimits {
            memory_bytes: 256 << 20,
            timeout: Duration::from_secs(10),
            max_text_bytes: 1 << 20,
        },
    ));
    println!(
        "{:?} after {:?}",
        r.map(|(b, _)| b.iter().map(|b| b.num_rows()).sum::<usize>()),
        start.elapsed()
    );
    let rss = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .unwrap()
        .to_string();
    println!("{rss}");
}
