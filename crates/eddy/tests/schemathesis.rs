//! Schemathesis (from PyPI) against the real server: it reads the API's
//! OpenAPI description from `/v0/api-doc/openapi.json`, generates requests
//! for every operation (valid and invalid, then sequences of calls), and
//! checks that no answer is a 5xx and that every status, content type and
//! body matches the description. Bounded in examples and time; the egress
//! stream and the log stream are left out (they never end by design).

mod common;

use std::process::Command;

use common::{scratch, tool, Server};

fn schemathesis(s: &Server, api_key: Option<&str>) {
    let st = tool("EDDY_SCHEMATHESIS", "st-venv/bin/st");
    let mut cmd = Command::new(st);
    cmd.arg("run")
        .arg(format!("{}/v0/api-doc/openapi.json", s.url))
        .args(["--url", &s.url])
        .args([
            "--max-examples",
            "25",
            "--max-time",
            "60",
            "--request-timeout",
            "20",
        ])
        .args([
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
        ])
        .args(["--exclude-path-regex", "/egress/|/logs$"])
        .args(["--workers", "1", "--seed", "4", "--no-color"])
        .env("SCHEMATHESIS_HOOKS", "")
        .current_dir(&s.data_dir);
    if let Some(k) = api_key {
        cmd.args(["-H", &format!("Authorization: Bearer {k}")]);
    }
    let out = cmd.output().expect("schemathesis runs");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "schemathesis found problems:\n{text}");
    assert_eq!(s.ok("GET", "/healthz", None)["status"], "healthy");
}

#[test]
fn schemathesis_finds_no_server_errors() {
    let dir = scratch("schemathesis");
    let mut s = Server::start(&dir.join("data"), None).owning(dir);
    s.deploy(
        "p",
        "CREATE TABLE t (id BIGINT, s VARCHAR) WITH ('materialized' = 'true');
         CREATE MATERIALIZED VIEW v AS SELECT s, COUNT(*) AS n FROM t GROUP BY s;",
    );
    s.ok("POST", "/v0/pipelines/p/start", None);
    schemathesis(&s, None);
    assert!(s.child.try_wait().unwrap().is_none(), "the server exited");
}

#[test]
fn schemathesis_with_an_api_key() {
    let dir = scratch("schemathesis-key");
    let mut s = Server::start(&dir.join("data"), Some("sekret")).owning(dir);
    s.deploy("p", "CREATE TABLE t (id BIGINT);");
    schemathesis(&s, Some("sekret"));
    assert!(s.child.try_wait().unwrap().is_none(), "the server exited");
}
