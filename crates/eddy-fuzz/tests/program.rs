//! Fuzzing the program front end: mutated programs are parsed, checked
//! (connectors included), lowered, and, when they check, run for two steps
//! over random rows. Any outcome but a panic, a stack overflow or a hang is
//! fine.

use std::fmt;

use eddy_fuzz::runner::fuzz;
use eddy_fuzz::seeds::Seeds;
use eddy_fuzz::{sql, values};
use eddy_server::connector::{self, FileAccess};
use eddy_sql::{limits, Pipeline, Program};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::json;

struct Case {
    text: String,
    rows_seed: u64,
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "-- rows seed {}\n{}", self.rows_seed, self.text)
    }
}

/// A random connector list, sometimes well-formed.
fn connectors(rng: &mut StdRng) -> String {
    let transport = *[
        "file_input",
        "url_input",
        "datagen",
        "kafka_input",
        "file_output",
        "nope",
    ]
    .choose(rng)
    .unwrap();
    let path = *["/etc/passwd", "../x", "in.csv", "", "a/../../b"]
        .choose(rng)
        .unwrap();
    let strategy = *["increment", "uniform", "zipf", "bogus"]
        .choose(rng)
        .unwrap();
    let (limit, rate) = (rng.gen_range(0..5), rng.gen_range(0..3));
    let range = [rng.gen_range(-5..5), rng.gen_range(-5..5)];
    let format = *["csv", "json", "avro"].choose(rng).unwrap();
    let config = match rng.gen_range(0..4) {
        0 => json!({ "path": path }),
        1 => {
            json!({"plan": [{"limit": limit, "rate": rate, "fields": {"x": {"strategy": strategy, "range": range}}}]})
        }
        2 => {
            json!({"bootstrap.servers": "127.0.0.1:1", "topic": "t", "plugin.library.paths": "/x.so"})
        }
        _ => values::any_json(rng, 0),
    };
    let list =
        json!([{"transport": {"name": transport, "config": config}, "format": {"name": format}}]);
    list.to_string().replace('\'', "''")
}

#[test]
fn programs() {
    let seeds = Seeds::load(usize::MAX);
    let data = std::env::temp_dir().join(format!("eddy-fuzz-program-{}", std::process::id()));
    let files = FileAccess::new(&data, &[]).unwrap();
    fuzz(
        "program",
        |rng| {
            let file = seeds.files.choose(rng).unwrap();
            let donor = seeds.files.choose(rng).unwrap();
            let query = file.queries.choose(rng).unwrap();
            let other = donor.queries.choose(rng).unwrap();
            let mut tables = file.tables.join(";\n");
            if rng.gen_bool(0.1) {
                tables = sql::mutate(rng, &tables, &donor.tables.join(";\n"));
            }
            if rng.gen_bool(0.1) {
                tables.push_str(&format!(
                    ";\nCREATE TABLE c (x INT) WITH ('connectors' = '{}')",
                    connectors(rng)
                ));
            }
            let view = if rng.gen_bool(0.85) {
                sql::mutate(rng, query, other)
            } else {
                query.clone()
            };
            Case {
                text: format!("{tables};\nCREATE VIEW v AS {view};"),
                rows_seed: rng.gen(),
            }
        },
        |case| {
            limits::with_stack(limits::stack_for_text(case.text.len()), || {
                let Ok(program) = Program::parse(&case.text) else {
                    return;
                };
                let _ = connector::specs(&program, &files);
                let tables: Vec<_> = program
                    .tables
                    .iter()
                    .map(|t| (t.name.clone(), t.schema.clone()))
                    .collect();
                let Ok(mut pipeline) = Pipeline::new(program) else {
                    return;
                };
                let mut rng = StdRng::seed_from_u64(case.rows_seed);
                let mut pushed = Vec::new();
                for (name, schema) in &tables {
                    let rows = values::rows(&mut rng, schema, 5);
                    let _ = pipeline.push(name, rows.clone());
                    pushed.push((name, rows));
                }
                if pipeline.step().is_err() {
                    return;
                }
                for view in pipeline.view_names() {
                    let _ = pipeline.view_rows(&view);
                }
                for (name, rows) in pushed {
                    let _ = pipeline.push(name, rows.negate());
                }
                let _ = pipeline.step();
            })
        },
    );
    let _ = std::fs::remove_dir_all(&data);
}
