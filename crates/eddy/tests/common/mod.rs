//! A real `eddy serve` process on a free loopback port, and a small HTTP
//! client for tests.

#![allow(dead_code)]

pub mod moto;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running server; killed when dropped.
pub struct Server {
    pub child: Child,
    pub url: String,
    pub data_dir: PathBuf,
    pub api_key: Option<String>,
    /// A folder removed once the server is stopped (see [`Server::owning`]).
    scratch: Option<Scratch>,
}

/// A fresh folder under the system's temporary folder, removed when
/// dropped, unless the test failed (then it is kept, to look into).
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A fresh folder under the system's temporary folder (see [`Scratch`]).
pub fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("eddy-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

impl Server {
    /// Starts `eddy serve` on 127.0.0.1:0 with `data_dir`.
    pub fn start(data_dir: &Path, api_key: Option<&str>) -> Self {
        Self::start_with(data_dir, api_key, &[])
    }

    /// Starts `eddy serve` on 127.0.0.1:0 with `data_dir` and more flags.
    pub fn start_with(data_dir: &Path, api_key: Option<&str>, flags: &[&str]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_eddy"));
        cmd.args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(flags)
            .env_remove("EDDY_API_KEY")
            .env(
                "EDDY_LOG",
                std::env::var("EDDY_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(k) = api_key {
            cmd.args(["--api-key", k]);
        }
        let mut child = cmd.spawn().expect("eddy serve starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            for _ in lines {}
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("eddy serve prints its address");
        let url = line
            .strip_prefix("eddy listening on ")
            .expect("address line")
            .to_string();
        Self {
            child,
            url,
            data_dir: data_dir.to_path_buf(),
            api_key: api_key.map(str::to_string),
            scratch: None,
        }
    }

    /// The server, removing `dir` (its data folder, or one above it) once
    /// it is stopped.
    pub fn owning(mut self, dir: Scratch) -> Self {
        self.scratch = Some(dir);
        self
    }

    fn request(&self, method: &str, path: &str) -> ureq::Request {
        let r =
            ureq::request(method, &format!("{}{path}", self.url)).timeout(Duration::from_secs(60));
        match &self.api_key {
            Some(k) => r.set("Authorization", &format!("Bearer {k}")),
            None => r,
        }
    }

    /// Waits until a started pipeline's input connector has put the start
    /// it chose (a table's latest version, a topic's end) into the state,
    /// so that a checkpoint taken next holds it: a pipeline steps once
    /// when it starts, and such a connector records its start in a step
    /// of its own.
    pub fn wait_start_recorded(&self, pipeline: &str) {
        wait_until("the connector's start recorded", || {
            self.ok("GET", &format!("/v0/pipelines/{pipeline}/stats"), None)["global_metrics"]
                ["steps"]
                .as_u64()
                .is_some_and(|n| n >= 2)
        });
    }

    /// Sends a request; returns the status and the body as text.
    pub fn send(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let r = self.request(method, path);
        let result = match body {
            Some(b) => r.send_string(b),
            None => r.call(),
        };
        answer(method, path, result)
    }

    /// Sends a request with a body of bytes; returns the status and the
    /// answer as text.
    pub fn send_bytes(&self, method: &str, path: &str, body: &[u8]) -> (u16, String) {
        answer(method, path, self.request(method, path).send_bytes(body))
    }

    /// Sends a request that must succeed; returns its JSON body (or Null).
    pub fn ok(&self, method: &str, path: &str, body: Option<&str>) -> Value {
        let (status, text) = self.send(method, path, body);
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {text}"
        );
        if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        }
    }

    /// Defines a pipeline.
    pub fn deploy(&self, name: &str, sql: &str) {
        let body = serde_json::json!({"name": name, "program_code": sql}).to_string();
        let d = self.ok("PUT", &format!("/v0/pipelines/{name}"), Some(&body));
        assert_eq!(d["program_status"], "Success", "{name}: {d}");
    }

    /// Defines pipeline `name` with `sql`, which must not check: it is
    /// stored, as Feldera stores a program that fails to compile, with
    /// `program_status` `SqlError` and a message holding `needle`, and
    /// starting it is a 400 `ProgramError` that leaves it stopped. Returns
    /// the first compiler message.
    pub fn deploy_refused(&self, name: &str, sql: &str, needle: &str) -> Value {
        let body = serde_json::json!({"name": name, "program_code": sql}).to_string();
        let d = self.ok("PUT", &format!("/v0/pipelines/{name}"), Some(&body));
        assert_eq!(d["program_status"], "SqlError", "{d}");
        let m = d["program_error"]["sql_compilation"]["messages"][0].clone();
        let text = m["message"].as_str().unwrap_or_default();
        assert!(text.contains(needle), "expected '{needle}': {d}");
        let (status, text) = self.send("POST", &format!("/v0/pipelines/{name}/start"), None);
        assert_eq!(status, 400, "{text}");
        let refused: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(refused["error_code"], "ProgramError", "{refused}");
        let said = refused["message"].as_str().unwrap_or_default();
        assert!(said.contains(needle), "{refused}");
        let d = self.ok("GET", &format!("/v0/pipelines/{name}"), None);
        assert_eq!(d["deployment_status"], "Stopped", "{d}");
        m
    }

    /// Sends input and waits until it is processed.
    pub fn ingest(&self, pipeline: &str, table: &str, params: &str, body: &str) -> Value {
        let v = self.ok(
            "POST",
            &format!("/v0/pipelines/{pipeline}/ingress/{table}?{params}"),
            Some(body),
        );
        let token = v["token"].as_str().expect("token").to_string();
        self.wait_token(pipeline, &token);
        v
    }

    /// Waits until a completion token is processed.
    pub fn wait_token(&self, pipeline: &str, token: &str) {
        wait_until(&format!("token {token}"), || {
            self.ok(
                "GET",
                &format!("/v0/pipelines/{pipeline}/completion_status?token={token}"),
                None,
            )["status"]
                == "complete"
        });
    }

    /// Runs an ad-hoc query answered as JSON lines.
    pub fn query(&self, pipeline: &str, sql: &str) -> Vec<Value> {
        let (status, text) = self.send(
            "GET",
            &format!(
                "/v0/pipelines/{pipeline}/query?format=json&sql={}",
                encode(sql)
            ),
            None,
        );
        assert_eq!(status, 200, "{sql}: {text}");
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Opens an egress stream; its lines arrive on the returned channel.
    pub fn egress(&self, pipeline: &str, view: &str, params: &str) -> mpsc::Receiver<Value> {
        let resp = self
            .request(
                "POST",
                &format!("/v0/pipelines/{pipeline}/egress/{view}?{params}"),
            )
            .timeout(Duration::from_secs(600))
            .call()
            .expect("egress opens");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(resp.into_reader()).lines() {
                let Ok(line) = line else { break };
                if line.trim().is_empty() {
                    continue;
                }
                if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                    break;
                }
            }
        });
        rx
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < deadline, "eddy did not exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A count from the environment (the long form of a test), else
/// `default`.
pub fn env_count(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Kills the server with SIGKILL after `delay`, from a thread of its own.
pub fn kill_after(s: &Server, delay: Duration) -> std::thread::JoinHandle<()> {
    let pid = s.child.id().to_string();
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        Command::new("kill").args(["-9", &pid]).status().unwrap();
    })
}

/// Percent-encodes a query parameter.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Polls `f` until it holds (60 s at most).
pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Collects the changes of egress chunks until `n` records arrived.
pub fn collect_changes(rx: &mpsc::Receiver<Value>, n: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while out.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("expected {n} changes, got {out:?}"));
        if let Some(data) = chunk["json_data"].as_array() {
            out.extend(data.iter().cloned());
        }
    }
    out
}

/// A tool that `scripts/test-tools.sh` installs under `$EDDY_CACHE`
/// (default `~/.cache/eddy`), or that the environment variable `var` names.
/// Panics, saying how to install it, when it is missing: these tests never
/// skip silently.
pub fn tool(var: &str, cache_path: &str) -> PathBuf {
    if let Ok(p) = std::env::var(var) {
        return PathBuf::from(p);
    }
    let cache = std::env::var("EDDY_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            Path::new(&std::env::var("HOME").unwrap_or_default()).join(".cache/eddy")
        });
    let p = cache.join(cache_path);
    assert!(
        p.exists(),
        "{} is missing: run `scripts/test-tools.sh` once (it installs the Kafka broker and \
         Feldera's Python client under ~/.cache/eddy), or set {var}",
        p.display()
    );
    p
}

/// A program that `scripts/test-tools.sh` installs from Debian: the path
/// the environment variable `var` names, or `name` on the PATH. Panics,
/// saying how to install it, when it is missing.
pub fn system_tool(var: &str, name: &str) -> PathBuf {
    if let Ok(p) = std::env::var(var) {
        return PathBuf::from(p);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "{name} is missing: run `scripts/test-tools.sh` once (it installs it from \
                 Debian), or set {var}"
            )
        })
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A response's status and body as text (an error status is an answer
/// too); a request that got no answer fails the test.
fn answer(method: &str, path: &str, result: Result<ureq::Response, ureq::Error>) -> (u16, String) {
    match result {
        Ok(resp) | Err(ureq::Error::Status(_, resp)) => {
            let status = resp.status();
            (status, resp.into_string().unwrap_or_default())
        }
        Err(e) => panic!("{method} {path}: {e}"),
    }
}
