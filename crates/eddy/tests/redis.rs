//! `redis_output` against a real Redis server: Debian's `redis-server`
//! (installed by `scripts/test-tools.sh`), started on a free loopback port
//! without persistence, and stopped with the test. The test reads Redis
//! with `redis-cli`, which comes with it.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, scratch, system_tool, wait_until, Server};
use serde_json::json;

/// A Redis server; killed when dropped.
struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    fn start() -> Self {
        let port = free_port();
        let child = Command::new(system_tool("EDDY_REDIS_SERVER", "redis-server"))
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let r = Self { child, port };
        let started = Instant::now();
        while r.cli(&["PING"]) != "PONG" {
            assert!(started.elapsed() < Duration::from_secs(30), "Redis answers");
            std::thread::sleep(Duration::from_millis(100));
        }
        r
    }

    fn cli(&self, args: &[&str]) -> String {
        Command::new(system_tool("EDDY_REDIS_CLI", "redis-cli"))
            .args(["-p", &self.port.to_string(), "--raw"])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim_end().to_string())
            .unwrap_or_default()
    }

    /// Every key with its value, in key order.
    fn all(&self) -> Vec<(String, String)> {
        let mut keys: Vec<String> = self
            .cli(&["KEYS", "*"])
            .lines()
            .filter(|k| !k.is_empty())
            .map(str::to_string)
            .collect();
        keys.sort();
        keys.into_iter()
            .map(|k| {
                let v = self.cli(&["GET", &k]);
                (k, v)
            })
            .collect()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Feldera's example: rows kept under keys made of `key_fields`, updated
/// and deleted as the view changes, through a SIGKILL and a restart.
#[test]
fn a_view_is_kept_in_redis_by_its_key_fields() {
    let redis = Redis::start();
    let output = json!([{"transport": {"name": "redis_output", "config": {
        "connection_string": format!("redis://127.0.0.1:{}/0", redis.port), "key_separator": ":"}},
        "format": {"name": "json", "config": {"key_fields": ["c0", "c2"]}}}]);
    let sql = format!(
        "CREATE TABLE t0 (c0 INT, c1 INT, c2 VARCHAR);
         CREATE MATERIALIZED VIEW v0 WITH ('connectors' = '{output}') AS SELECT * FROM t0;"
    );
    let dir = scratch("redis");
    {
        let s = Server::start(&dir, None);
        let body = json!({
            "program_code": sql,
            "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 1}},
        });
        s.ok("PUT", "/v0/pipelines/r", Some(&body.to_string()));
        s.ok("POST", "/v0/pipelines/r/start", None);
        s.ingest(
            "r",
            "t0",
            "format=json",
            r#"{"insert": {"c0": 1, "c1": 1, "c2": "first"}}
{"insert": {"c0": 2, "c1": 5, "c2": "second"}}"#,
        );
        wait_until("the first rows", || redis.all().len() == 2);
        assert_eq!(
            redis.all(),
            [
                (
                    "1:first".to_string(),
                    r#"{"c0":1,"c1":1,"c2":"first"}"#.to_string()
                ),
                (
                    "2:second".to_string(),
                    r#"{"c0":2,"c1":5,"c2":"second"}"#.to_string()
                ),
            ]
        );
        // An update of a key (its value replaced), a key deleted.
        s.ingest(
            "r",
            "t0",
            "format=json",
            r#"{"delete": {"c0": 1, "c1": 1, "c2": "first"}}
{"insert": {"c0": 1, "c1": 9, "c2": "first"}}
{"delete": {"c0": 2, "c1": 5, "c2": "second"}}"#,
        );
        wait_until("the update", || {
            redis.all()
                == [(
                    "1:first".to_string(),
                    r#"{"c0":1,"c1":9,"c2":"first"}"#.to_string(),
                )]
        });
        s.ok("POST", "/v0/pipelines/r/checkpoint", None);
        s.ingest(
            "r",
            "t0",
            "format=json",
            r#"{"insert": {"c0": 3, "c1": 0, "c2": null}}"#,
        );
        wait_until("after the checkpoint", || redis.all().len() == 2);
    }
    let s = Server::start(&dir, None);
    wait_until("running again", || {
        s.ok("GET", "/v0/pipelines/r", None)["deployment_status"] == "Running"
    });
    s.ingest(
        "r",
        "t0",
        "format=json",
        r#"{"delete": {"c0": 1, "c1": 9, "c2": "first"}}"#,
    );
    wait_until("after the restart", || {
        redis.all()
            == [(
                "3:null".to_string(),
                r#"{"c0":3,"c1":0,"c2":null}"#.to_string(),
            )]
    });
    s.ok("POST", "/v0/pipelines/r/stop?force=true", None);
}
