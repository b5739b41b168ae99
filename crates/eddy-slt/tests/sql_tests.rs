//! Runs the project's own sqllogictest files in `sql-tests/`: every query
//! must pass and every statement must behave as expected.

use std::path::PathBuf;

/// The `.slt` files of `sql-tests/`, in order.
fn slt_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../sql-tests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("sql-tests folder")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .slt files in {}", dir.display());
    files
}

#[test]
fn sql_tests_pass() {
    let files = slt_files();
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

/// The same files with every operator's state on disk: a storage whose
/// threshold is 0 writes every merged batch to a file, so each answer is
/// read back through mapped files, and every such merge runs on the
/// storage's merger thread while the steps go on.
#[test]
fn sql_tests_pass_with_state_on_disk() {
    let files = slt_files();
    let scratch = std::env::temp_dir().join(format!("eddy-slt-storage-{}", std::process::id()));
    let storage = eddy_dbsp::Storage::open(&scratch, 0).expect("storage");
    storage.set_background_merge_bytes(0);
    let mut problems = Vec::new();
    for file in &files {
        let report =
            eddy_dbsp::storage::with_storage(Some(std::sync::Arc::clone(&storage)), || {
                eddy_slt::run_file(file, 7)
            });
        if report.failed > 0 || report.statement_failures > 0 {
            problems.push(format!("{}: {report:#?}", file.display()));
        }
    }
    assert!(storage.stats().written_bytes > 0, "nothing went to disk");
    assert!(
        storage.stats().background_merges > 0,
        "no merge in the background"
    );
    assert_eq!(storage.stats().files, 0, "files outlived their traces");
    drop(storage);
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The same files with every query's pipeline checkpointed after each of
/// its steps and restored into a new pipeline that takes the next step:
/// once with every batch in memory (written into the checkpoint), once
/// with every batch in a storage file (linked into the checkpoint and
/// adopted back).
#[test]
fn sql_tests_pass_across_checkpoints() {
    let files = slt_files();
    let scratch = std::env::temp_dir().join(format!("eddy-slt-checkpoint-{}", std::process::id()));
    let storage = eddy_dbsp::Storage::open(&scratch.join("storage"), 0).expect("storage");
    let mut problems = Vec::new();
    for file in &files {
        let checkpoint = scratch.join("checkpoint");
        let report = eddy_slt::run_file_restarting(file, 11, &checkpoint);
        let on_disk =
            eddy_dbsp::storage::with_storage(Some(std::sync::Arc::clone(&storage)), || {
                eddy_slt::run_file_restarting(file, 12, &checkpoint)
            });
        for (report, how) in [(report, "in memory"), (on_disk, "on disk")] {
            if report.failed > 0 || report.statement_failures > 0 {
                problems.push(format!("{} ({how}): {report:#?}", file.display()));
            }
        }
    }
    assert!(storage.stats().written_bytes > 0, "nothing went to disk");
    assert_eq!(storage.stats().files, 0, "files outlived their traces");
    drop(storage);
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The same files with every keyed operator split over three workers
/// (shards evaluated in parallel, rows routed by the hash of their key),
/// then split over two and checkpointed and restored after every step:
/// the answers must not change.
#[test]
fn sql_tests_pass_with_workers() {
    let files = slt_files();
    let scratch = std::env::temp_dir().join(format!("eddy-slt-workers-{}", std::process::id()));
    let mut problems = Vec::new();
    for file in &files {
        let three = eddy_slt::Database::new().with_workers(3);
        let report = eddy_slt::run_file_with(file, 13, three);
        let two = eddy_slt::Database::restarting(&scratch).with_workers(2);
        let restarting = eddy_slt::run_file_with(file, 14, two);
        for (report, how) in [(report, "3 workers"), (restarting, "2 workers, restarting")] {
            if report.failed > 0 || report.statement_failures > 0 {
                problems.push(format!("{} ({how}): {report:#?}", file.display()));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
