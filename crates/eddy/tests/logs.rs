//! The server's log as a user reads it: a pipeline's lines streamed by
//! `GET /v0/pipelines/{name}/logs` (its requests, its program, its start,
//! the rows it rejected; no other pipeline's), and standard error under
//! the default filter: Eddy's own lines, no library's, no colour codes
//! when it is not a terminal, and JSON lines on request.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{scratch, wait_until, Server};
use serde_json::json;

const PROGRAM: &str = "CREATE TABLE t (x INT) WITH ('materialized' = 'true'); \
                       CREATE VIEW v AS SELECT x + 1 AS y FROM t;";

/// Reads a streamed log in the background, line by line.
fn follow(s: &Server, pipeline: &str) -> mpsc::Receiver<String> {
    let response = ureq::get(&format!("{}/v0/pipelines/{pipeline}/logs", s.url))
        .call()
        .expect("the log streams");
    assert!(response.content_type().starts_with("text/plain"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(response.into_reader()).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Lines from `rx` until one holds each of `wanted` (in any order).
fn read_until(rx: &mpsc::Receiver<String>, wanted: &[&str]) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut lines: Vec<String> = Vec::new();
    while !wanted.iter().all(|w| lines.iter().any(|l| l.contains(w))) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => lines.push(l),
            Err(_) => panic!("the log lacks one of {wanted:?}: {lines:#?}"),
        }
    }
    lines
}

#[test]
fn a_pipelines_log_streams_its_requests_program_start_and_rejected_rows() {
    let dir = scratch("logs");
    let s = Server::start(&dir, None);
    s.deploy("p", PROGRAM);
    s.deploy("other", PROGRAM);
    s.ok("POST", "/v0/pipelines/p/start", None);
    s.ok("POST", "/v0/pipelines/other/start", None);
    let (status, body) = s.send(
        "POST",
        "/v0/pipelines/p/ingress/t",
        Some("{\"insert\": {\"x\": 1}}\n{\"insert\": {\"x\": \"many\"}}"),
    );
    assert_eq!(status, 400);
    // The reason in SQL's words: the column and its declared type.
    assert!(
        body.contains("column 'x': failed to parse \\\"many\\\" as INTEGER"),
        "{body}"
    );
    // The standard error filter of the tests is `warn`: the pipeline's
    // log keeps Eddy's info lines regardless.
    let rx = follow(&s, "p");
    let lines = read_until(
        &rx,
        &[
            "pipeline defined: its program checked",
            "method=POST path=/v0/pipelines/p/start status=202",
            "pipeline started",
            "rows rejected; the last: line 2",
            "method=POST path=/v0/pipelines/p/ingress/t status=400",
        ],
    );
    assert!(
        lines.iter().all(|l| !l.contains("/pipelines/other")),
        "{lines:#?}"
    );
    // Lines that come later are streamed as they are written.
    s.ok("POST", "/v0/pipelines/p/checkpoint", None);
    read_until(&rx, &["checkpoint done", "path=/v0/pipelines/p/checkpoint"]);
    // A deleted pipeline's log ends.
    s.ok("POST", "/v0/pipelines/p/stop?force=true", None);
    wait_until("stopped", || {
        s.ok("GET", "/v0/pipelines/p", None)["deployment_status"] == "Stopped"
    });
    s.ok("DELETE", "/v0/pipelines/p", None);
    let ended = Instant::now() + Duration::from_secs(30);
    loop {
        match rx.recv_timeout(ended.saturating_duration_since(Instant::now())) {
            Ok(_) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("the log of a deleted pipeline ends"),
        }
    }
    assert_eq!(s.send("GET", "/v0/pipelines/p/logs", None).0, 404);
}

/// Runs `eddy serve` with `args` and no log filter in its environment,
/// through a short session; returns its standard error.
fn session(args: &[&str]) -> String {
    let dir = scratch(&format!("logs-stderr-{}", args.len()));
    let err = dir.join("stderr.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_eddy"))
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(&*dir)
        .args(args)
        .env_remove("EDDY_LOG")
        .env_remove("RUST_LOG")
        .env_remove("EDDY_LOG_FORMAT")
        .env_remove("EDDY_API_KEY")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("eddy serve starts");
    let mut address = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut address)
        .unwrap();
    let url = address
        .trim()
        .strip_prefix("eddy listening on ")
        .expect("the address")
        .to_string();
    let call = |method: &str, path: &str, body: Option<String>| {
        let r = ureq::request(method, &format!("{url}{path}"));
        let _ = match body {
            Some(b) => r.send_string(&b),
            None => r.call(),
        };
    };
    let put = json!({"program_code": PROGRAM}).to_string();
    call("PUT", "/v0/pipelines/p", Some(put));
    let wrong = json!({"program_code": "CREATE VIEW w AS SELECT nope FROM missing;"}).to_string();
    call("PUT", "/v0/pipelines/wrong", Some(wrong));
    call("POST", "/v0/pipelines/p/start", None);
    call(
        "POST",
        "/v0/pipelines/p/ingress/t",
        Some("{\"insert\": {\"x\": 1}}".into()),
    );
    call(
        "GET",
        "/v0/pipelines/p/query?sql=SELECT%20*%20FROM%20t&format=json",
        None,
    );
    call("POST", "/v0/pipelines/p/stop?force=true", None);
    std::thread::sleep(Duration::from_millis(300));
    let _ = child.kill();
    let _ = child.wait();
    std::fs::read_to_string(&err).unwrap()
}

#[test]
fn standard_error_holds_eddys_lines_and_no_librarys() {
    let text = session(&[]);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        !text.contains('\u{1b}'),
        "no colour codes into a file: {text}"
    );
    for wanted in [
        "eddy server listening",
        "pipeline defined: its program checked",
        "program stored with an error",
        "pipeline started",
        "path=/v0/pipelines/p/start status=202",
        "pipeline stopped",
    ] {
        assert!(text.contains(wanted), "{wanted:?} missing from:\n{text}");
    }
    // Successful reads and ingress are not logged at info.
    assert!(!text.contains("path=/v0/pipelines/p/query"), "{text}");
    assert!(!text.contains("path=/v0/pipelines/p/ingress"), "{text}");
    // Every line is one of Eddy's own targets (`eddy`, `eddy_server::…`),
    // after its span if it has one.
    for line in &lines {
        let target = line
            .split_whitespace()
            .find(|w| w.ends_with(':') && !w.contains('{'))
            .unwrap_or_default();
        assert!(
            target == "eddy:" || target.starts_with("eddy_"),
            "a line of a library: {line}"
        );
    }

    let json_text = session(&["--log-format", "json"]);
    let mut targets = 0;
    for line in json_text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(v["level"].is_string() && v["fields"]["message"].is_string());
        targets += usize::from(v["target"].as_str().unwrap().starts_with("eddy"));
    }
    assert!(targets >= 5, "{json_text}");
}
