//! Feldera's own Python client (`feldera` from PyPI, unchanged) drives a
//! real `eddy serve`: `tests/python/feldera_flow.py`.

mod common;

use std::process::Command;

use common::{scratch, tool, Server};

fn run_flow(api_key: Option<&str>) {
    let python = tool("EDDY_PYTHON", "venv/bin/python");
    let dir = scratch(&format!("feldera-{}", api_key.is_some()));
    let s = Server::start(&dir, api_key);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/feldera_flow.py");
    let mut cmd = Command::new(python);
    cmd.arg(script).arg(&s.url).env_remove("FELDERA_API_KEY");
    if let Some(k) = api_key {
        cmd.arg(k);
    }
    let out = cmd.output().expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("feldera client flow: OK"),
        "status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
}

#[test]
fn feldera_python_client_drives_eddy() {
    run_flow(None);
}

#[test]
fn feldera_python_client_with_an_api_key() {
    run_flow(Some("k3y"));
}
