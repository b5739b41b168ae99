//! The web console in a real browser: Debian's headless `chromium`, driven
//! through `chromium-driver` by Selenium (from PyPI) in
//! `tests/python/console_flow.py`, against a real `eddy serve` with an API
//! key. The script does what a new user would, without curl: logs in,
//! creates a pipeline in the editor, sees its error marked, fixes it,
//! starts it, inserts and deletes rows while a second window watches the
//! view change, runs an ad-hoc query and downloads it, opens the charts and
//! stops the pipeline. Screenshots of every page are written to
//! `$CARGO_TARGET_TMPDIR/console-screenshots` (not committed).

mod common;

use std::path::Path;
use std::process::Command;

use common::{scratch, system_tool, tool, Server};

#[test]
fn the_console_creates_fixes_feeds_watches_queries_and_stops_a_pipeline() {
    let python = tool("EDDY_SELENIUM_PYTHON", "selenium-venv/bin/python");
    let chromium = system_tool("EDDY_CHROMIUM", "chromium");
    let driver = system_tool("EDDY_CHROMEDRIVER", "chromedriver");
    let dir = scratch("console");
    let server = Server::start(&dir, Some("console-key")).owning(dir);
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    let _ = std::fs::remove_dir_all(&shots);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/console_flow.py");
    let out = Command::new(python)
        .arg(script)
        .arg(&server.url)
        .arg("console-key")
        .arg(&shots)
        .arg(chromium)
        .arg(driver)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("console flow passed"),
        "status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}\nscreenshots: {}",
        out.status,
        shots.display()
    );
    println!("screenshots of the console: {}", shots.display());
}
