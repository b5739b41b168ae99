//! Runs the project's own sqllogictest files in `sql-tests/`: every query
//! must pass and every statement must behave as expected.

use std::path::PathBuf;

#[test]
fn sql_tests_pass() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../sql-tests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("sql-tests folder")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .slt files in {}", dir.display());
    let mut problems = Vec::new();
    let mut passed = 0;
    for seed in 0..3 {
        for file in &files {
            let report = eddy_slt::run_file(file, seed);
            passed += report.passed;
            if report.failed > 0 || report.statement_failures > 0 {
                problems.push(format!("{} (seed {seed}): {report:#?}", file.display()));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(passed > 0);
}
