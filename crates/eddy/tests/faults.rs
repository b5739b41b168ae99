//! The fault suite, damaged files: a real `eddy serve` is killed with
//! SIGKILL, one of the files it relies on is damaged the way a disk or an
//! operator damages files (deleted, emptied, garbage, one flipped byte,
//! cut short), and the server is started again. Each case has one
//! expected outcome: recovered exactly, or refused with the file named and
//! what would be lost, then started by the user's explicit
//! `?recover=accept_loss` with exactly the loss it was told of. Never a
//! silent loss of acknowledged input. (The kill -9 campaigns are in
//! `recovery.rs` and `kafka.rs`.)

mod common;

use std::path::{Path, PathBuf};

use common::{env_count, kill_after, scratch, wait_until, Scratch, Server};
use serde_json::{json, Value};

const SQL: &str = "CREATE TABLE t (id BIGINT NOT NULL PRIMARY KEY);
     CREATE MATERIALIZED VIEW v AS SELECT COUNT(*) AS n, SUM(id) AS s FROM t;";

/// Batches sent: `BATCHES` of 10 ids each, a checkpoint after the second
/// and the fourth.
const BATCHES: i64 = 6;

/// What view `v` holds after batches `0..b`.
fn after_batches(b: i64) -> Value {
    let ids = 0..b * 10;
    json!({"n": ids.clone().count(), "s": ids.sum::<i64>()})
}

fn storage(data: &Path) -> PathBuf {
    data.join("pipelines").join("p.storage")
}

/// A pipeline `p` that took every batch, with or without fault tolerance
/// (checkpoints only when asked), in a server then killed: its data
/// folder, holding checkpoints 1 and 2.
fn prepared(name: &str, fault_tolerance: bool) -> (Scratch, PathBuf) {
    let dir = scratch(name);
    let data = dir.join("data");
    let s = Server::start(&data, None);
    deploy(&s, SQL, fault_tolerance);
    for b in 0..BATCHES {
        let rows: String = (b * 10..b * 10 + 10)
            .map(|id| json!({"insert": {"id": id}}).to_string() + "\n")
            .collect();
        s.ingest("p", "t", "format=json&update_format=insert_delete", &rows);
        if b == 1 || b == 3 {
            s.ok("POST", "/v0/pipelines/p/checkpoint", None);
        }
    }
    assert_eq!(view(&s), after_batches(BATCHES));
    drop(s); // SIGKILL
    let checkpoints: Vec<String> = std::fs::read_dir(storage(&data).join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(checkpoints.contains(&"2".to_string()), "{checkpoints:?}");
    (dir, data)
}

/// Deploys and starts pipeline `p` of `sql`, with fault tolerance
/// (checkpoints only when asked) or without.
fn deploy(s: &Server, sql: &str, fault_tolerance: bool) {
    let mut runtime_config = json!({});
    if fault_tolerance {
        runtime_config["fault_tolerance"] =
            json!({"model": "exactly_once", "checkpoint_interval_secs": 3600});
    }
    let body = json!({"program_code": sql, "runtime_config": runtime_config});
    s.ok("PUT", "/v0/pipelines/p", Some(&body.to_string()));
    s.ok("POST", "/v0/pipelines/p/start", None);
    wait_running(s);
}

/// Fails unless `error` holds each of `needles`.
fn assert_says(error: &str, needles: &[&str]) {
    for needle in needles {
        assert!(error.contains(needle), "'{needle}' not in: {error}");
    }
}

fn wait_running(s: &Server) {
    wait_until("the pipeline to be running", || {
        s.ok("GET", "/v0/pipelines/p", None)["deployment_status"] == "Running"
    });
}

fn view(s: &Server) -> Value {
    s.query("p", "SELECT n, s FROM v").remove(0)
}

/// Waits for the view to hold `want` after a restart, then checks that it
/// stays there: the journal's records are queued before the pipeline
/// reports `Running`, and the steps that take them follow (a loaded
/// machine may query between), but nothing may go past `want`.
fn view_becomes(s: &Server, want: &Value, what: &str) {
    wait_until(what, || view(s) == *want);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(view(s), *want, "{what}");
}

/// The error a restarted server shows for `p`, which it did not start.
fn refused(s: &Server) -> String {
    let p = s.ok("GET", "/v0/pipelines/p", None);
    assert_eq!(p["deployment_status"], "Stopped", "{p}");
    p["deployment_error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no deployment_error: {p}"))
        .to_string()
}

/// Starts `p` with `?recover=accept_loss` and waits until it runs.
fn accept_loss(s: &Server) {
    s.ok("POST", "/v0/pipelines/p/start?recover=accept_loss", None);
    wait_running(s);
}

/// The journal's segment files, in record order.
fn journal_segments(data: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(storage(data).join("journal-v1"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    found.sort();
    found
}

#[test]
fn a_damaged_newest_checkpoint_under_fault_tolerance_recovers_exactly_from_the_older() {
    type Damage = fn(&Path);
    let damages: [(&str, Damage); 5] = [
        ("deleted", |m| std::fs::remove_file(m).unwrap()),
        ("empty", |m| std::fs::write(m, b"").unwrap()),
        ("garbage", |m| {
            std::fs::write(m, b"\x7fELF garbage").unwrap()
        }),
        ("one flipped digit", |m| {
            let text = std::fs::read_to_string(m).unwrap();
            let changed = text.replacen("\"steps\": ", "\"steps\": 1", 1);
            assert_ne!(text, changed);
            std::fs::write(m, changed).unwrap()
        }),
        ("the state file's byte flipped", |m| {
            let state = m.with_file_name("state.bin");
            let mut bytes = std::fs::read(&state).unwrap();
            bytes[10] ^= 0x01;
            std::fs::write(&state, bytes).unwrap()
        }),
    ];
    for (case, damage) in damages {
        let name: String = case.chars().filter(char::is_ascii_alphanumeric).collect();
        let (_dir, data) = prepared(&format!("ckpt-{name}"), true);
        // Stray leftovers of a checkpoint that never finished.
        let unfinished = storage(&data).join("checkpoints").join("3.tmp");
        std::fs::create_dir_all(&unfinished).unwrap();
        std::fs::write(unfinished.join("state.bin"), b"half").unwrap();
        damage(&storage(&data).join("checkpoints/2/manifest.json"));
        let s = Server::start(&data, None);
        wait_running(&s);
        // The older checkpoint and the journal since it hold everything.
        view_becomes(&s, &after_batches(BATCHES), case);
        assert!(!unfinished.exists(), "{case}: 3.tmp was left");
    }
}

#[test]
fn a_damaged_newest_checkpoint_without_a_journal_is_refused_until_the_loss_is_accepted() {
    let (_dir, data) = prepared("ckpt-no-journal", false);
    let manifest = storage(&data).join("checkpoints/2/manifest.json");
    std::fs::write(&manifest, b"{\"sequence_number\": 2").unwrap();
    let s = Server::start(&data, None);
    let error = refused(&s);
    assert_says(
        &error,
        &[
            "checkpoint 2 is damaged",
            manifest.to_str().unwrap(),
            "starting from checkpoint 1 loses the input taken since",
            "recover=accept_loss",
        ],
    );
    // An unknown choice is refused by name.
    let (status, text) = s.send("POST", "/v0/pipelines/p/start?recover=yes", None);
    assert!(
        status == 400 && text.contains("unknown recover 'yes'"),
        "{status} {text}"
    );
    accept_loss(&s);
    // Checkpoint 1 held the first two batches.
    assert_eq!(view(&s), after_batches(2));
}

#[test]
fn a_damaged_journal_record_is_refused_by_name_and_its_loss_accepted_once() {
    let (_dir, data) = prepared("journal-flip", true);
    // Checkpoint 2 holds batches 0 to 3 (records 1 to 4); the newest
    // segment holds records 5 and 6. One bit of record 5 flipped.
    let segment = journal_segments(&data).pop().unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[60] ^= 0x10;
    std::fs::write(&segment, bytes).unwrap();
    let s = Server::start(&data, None);
    let error = refused(&s);
    assert_says(
        &error,
        &[
            segment.to_str().unwrap(),
            "a damaged record at byte 0",
            "recover=accept_loss",
        ],
    );
    accept_loss(&s);
    assert_eq!(view(&s), after_batches(4));
    // New input is taken and kept; the start checkpointed, so the next
    // restart needs no choice.
    let rows = json!({"insert": {"id": 1000}}).to_string();
    s.ingest("p", "t", "format=json&update_format=insert_delete", &rows);
    let expected = json!({"n": 41, "s": after_batches(4)["s"].as_i64().unwrap() + 1000});
    assert_eq!(view(&s), expected);
    drop(s);
    let s = Server::start(&data, None);
    wait_running(&s);
    view_becomes(&s, &expected, "the rows kept across the restart");
}

#[test]
fn a_lost_journal_is_refused() {
    let (_dir, data) = prepared("journal-gone", true);
    std::fs::remove_dir_all(storage(&data).join("journal-v1")).unwrap();
    let s = Server::start(&data, None);
    let error = refused(&s);
    assert!(
        error.contains("journal-v1 is gone") && error.contains("recover=accept_loss"),
        "{error}"
    );
    accept_loss(&s);
    assert_eq!(view(&s), after_batches(4));
}

#[test]
fn a_missing_journal_segment_is_refused_with_the_records_it_held() {
    let (_dir, data) = prepared("journal-segment", true);
    // The segment after the older checkpoint's position, which a start
    // from the older checkpoint (the newest damaged) needs.
    std::fs::remove_file(storage(&data).join("checkpoints/2/manifest.json")).unwrap();
    let segments = journal_segments(&data);
    assert_eq!(segments.len(), 2, "{segments:?}");
    std::fs::remove_file(&segments[0]).unwrap();
    let s = Server::start(&data, None);
    let error = refused(&s);
    assert!(
        error.contains("records 3 to 4 are missing") && error.contains("checkpoint 2 is damaged"),
        "{error}"
    );
}

#[test]
fn a_final_record_cut_short_is_a_torn_write_and_is_cut_off() {
    // What a crash in the middle of a write leaves (the record was never
    // synced, so never acknowledged) cannot be told from a file cut by
    // hand: both are cut off, and the pipeline starts.
    let (_dir, data) = prepared("journal-torn", true);
    let segment = journal_segments(&data).pop().unwrap();
    let len = std::fs::metadata(&segment).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    f.set_len(len - 100).unwrap();
    drop(f);
    let s = Server::start(&data, None);
    wait_running(&s);
    view_becomes(&s, &after_batches(BATCHES - 1), "all but the torn record");
}

/// Sends the head of a POST whose body claims `claimed` bytes, then
/// `body`, then closes the connection: a client that died mid-request.
fn cut_request(s: &Server, path: &str, body: &[u8], claimed: usize) {
    use std::io::Write;
    let addr = s.url.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    write!(
        conn,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {claimed}\r\n\r\n"
    )
    .unwrap();
    conn.write_all(body).unwrap();
    conn.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(conn);
}

#[test]
fn a_request_cut_short_applies_none_of_its_rows() {
    let dir = scratch("cut-request");
    let data = dir.join("data");
    let s = Server::start(&data, None);
    deploy(&s, SQL, true);
    let ingress = "/v0/pipelines/p/ingress/t?format=json&update_format=insert_delete";
    // 100,000 rows (several pieces of the body parsed and held), then the
    // client is gone before the end.
    let rows: String = (0..100_000)
        .map(|id| json!({"insert": {"id": id}}).to_string() + "\n")
        .collect();
    cut_request(&s, ingress, rows.as_bytes(), rows.len() * 2);
    // A request that ends: its rows, and only its, are applied.
    s.ingest(
        "p",
        "t",
        "format=json&update_format=insert_delete",
        "{\"insert\": {\"id\": -1}}\n",
    );
    assert_eq!(view(&s), json!({"n": 1, "s": -1}));
    // Nor did the journal keep any of it.
    drop(s);
    let s = Server::start(&data, None);
    wait_running(&s);
    view_becomes(&s, &json!({"n": 1, "s": -1}), "only the row applied");
}

/// A small tmpfs mounted for the test, unmounted when dropped.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(at: &Path, bytes: u64) -> Self {
        std::fs::create_dir_all(at).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}")])
            .arg("tmpfs")
            .arg(at)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "mounting a tmpfs for the full-disk case needs root (as on the CI machine)"
        );
        Self(at.to_path_buf())
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .args(["-l"])
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_full_disk_is_shown_refuses_input_whole_and_recovers_when_space_returns() {
    let dir = scratch("full-disk");
    let disk = SmallDisk::mount(&dir.join("disk"), 8 << 20);
    let data = disk.0.join("data");
    // What takes the disk's space, given back later.
    let filler = disk.0.join("filler");
    std::fs::write(&filler, vec![7u8; 6 << 20]).unwrap();
    let s = Server::start(&data, None);
    deploy(&s, SQL, true);
    let ingress = "/v0/pipelines/p/ingress/t?format=json&update_format=insert_delete";
    let batch = |b: i64| -> String {
        (b * 1000..b * 1000 + 1000)
            .map(|id| json!({"insert": {"id": id}}).to_string() + "\n")
            .collect()
    };
    let mut acked = 0;
    let refusal = loop {
        let (status, text) = s.send("POST", ingress, Some(&batch(acked)));
        if status != 200 {
            break (status, text);
        }
        acked += 1;
        assert!(acked < 2000, "the disk never filled");
    };
    let (status, text) = refusal;
    assert_eq!(status, 503, "{text}");
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["error_code"], "InputNotDurable", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("none of the request was applied"),
        "{e}"
    );
    // Running, degraded, saying why; reads are answered, and the refused
    // request left nothing behind.
    let p = s.ok("GET", "/v0/pipelines/p", None);
    assert_eq!(p["deployment_status"], "Running", "{p}");
    assert_eq!(p["storage_error"]["error_code"], "StorageDegraded", "{p}");
    let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
    assert!(
        stats["global_metrics"]["storage_degraded"].is_string(),
        "{stats}"
    );
    let (_, metrics) = s.send("GET", "/v0/pipelines/p/metrics", None);
    assert!(
        metrics.contains("eddy_storage_degraded{pipeline=\"p\"} 1"),
        "{metrics}"
    );
    wait_until("the acknowledged batches to be processed", || {
        view(&s)["n"] == json!(acked * 1000)
    });
    // A checkpoint fails too, and leaves no unfinished folder behind.
    let (status, _) = s.send("POST", "/v0/pipelines/p/checkpoint", None);
    assert_ne!(status, 200);
    let unfinished: Vec<_> = std::fs::read_dir(storage(&data).join("checkpoints"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        unfinished
            .iter()
            .all(|n| !n.to_string_lossy().ends_with(".tmp")),
        "{unfinished:?}"
    );
    // Space returns: input and checkpoints succeed, the state clears.
    std::fs::remove_file(&filler).unwrap();
    let (status, text) = s.send("POST", ingress, Some(&batch(acked)));
    assert_eq!(status, 200, "{text}");
    acked += 1;
    s.ok("POST", "/v0/pipelines/p/checkpoint", None);
    let p = s.ok("GET", "/v0/pipelines/p", None);
    assert!(p["storage_error"].is_null(), "{p}");
    // Every acknowledged row, and no other, survives a kill.
    drop(s);
    let s = Server::start(&data, None);
    wait_running(&s);
    let ids = 0..acked * 1000;
    assert_eq!(
        view(&s),
        json!({"n": ids.clone().count(), "s": ids.sum::<i64>()})
    );
    drop(s);
    drop(disk);
}

fn json_of(resp: ureq::Response) -> Value {
    serde_json::from_str(&resp.into_string().unwrap()).unwrap()
}

/// Sends a keyed ingress request; returns the answer.
fn keyed(s: &Server, key: &str, body: &str) -> (u16, Value) {
    let r = ureq::post(&format!(
        "{}/v0/pipelines/p/ingress/t?format=json&update_format=insert_delete",
        s.url
    ))
    .set("Idempotency-Key", key);
    match r.send_string(body) {
        Ok(resp) => (resp.status(), json_of(resp)),
        Err(ureq::Error::Status(status, resp)) => (status, json_of(resp)),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_resent_request_with_its_idempotency_key_is_applied_once_across_restarts() {
    let dir = scratch("idempotency");
    let data = dir.join("data");
    let s = Server::start(&data, None);
    deploy(
        &s,
        "CREATE TABLE t (id BIGINT);
            CREATE MATERIALIZED VIEW v AS SELECT COUNT(*) AS n, SUM(id) AS s FROM t;",
        true,
    );
    // A table without a key: a resend without an idempotency key would
    // count twice.
    let rows = |from: i64| -> String {
        (from..from + 5)
            .map(|id| json!({"insert": {"id": id}}).to_string() + "\n")
            .collect()
    };
    let (status, first) = keyed(&s, "req-1", &rows(0));
    assert_eq!((status, &first["accepted"]), (200, &json!(5)), "{first}");
    assert!(first.get("duplicate").is_none(), "{first}");
    let (status, again) = keyed(&s, "req-1", &rows(0));
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        (&again["accepted"], &again["duplicate"]),
        (&json!(5), &json!(true))
    );
    s.wait_token("p", again["token"].as_str().unwrap());
    assert_eq!(view(&s), json!({"n": 5, "s": 10}));
    // A bad key is refused by name.
    let (status, bad) = keyed(&s, "two words", &rows(0));
    assert_eq!(status, 400, "{bad}");
    // Remembered through a crash (from the journal)...
    drop(s);
    let s = Server::start(&data, None);
    wait_running(&s);
    assert_eq!(keyed(&s, "req-1", &rows(0)).1["duplicate"], json!(true));
    let (_, second) = keyed(&s, "req-2", &rows(100));
    s.wait_token("p", second["token"].as_str().unwrap());
    // ...and through checkpoints that trim the journal (from the
    // checkpoint's positions).
    s.ok("POST", "/v0/pipelines/p/checkpoint", None);
    s.ok("POST", "/v0/pipelines/p/checkpoint", None);
    s.ok("POST", "/v0/pipelines/p/checkpoint", None);
    drop(s);
    let s = Server::start(&data, None);
    wait_running(&s);
    for key in ["req-1", "req-2"] {
        let (status, v) = keyed(&s, key, &rows(0));
        assert_eq!((status, &v["duplicate"]), (200, &json!(true)), "{key}: {v}");
    }
    assert_eq!(view(&s), json!({"n": 10, "s": 10 + 510}));
}

/// One keyed ingress request, without panicking when the server is gone:
/// its status, or none.
fn try_keyed(url: &str, key: &str, body: &str) -> Option<u16> {
    let r = ureq::post(&format!(
        "{url}/v0/pipelines/p/ingress/t?format=json&update_format=insert_delete"
    ))
    .set("Idempotency-Key", key)
    .timeout(std::time::Duration::from_secs(10));
    match r.send_string(body) {
        Ok(resp) => Some(resp.status()),
        Err(ureq::Error::Status(status, _)) => Some(status),
        Err(_) => None,
    }
}

#[test]
fn keyed_http_ingest_into_a_table_without_a_key_is_exactly_once_through_kills() {
    use rand::{Rng, SeedableRng};
    // The long form: EDDY_CHAOS_KILLS=1000 (and a new EDDY_CHAOS_SEED).
    let kills = env_count("EDDY_CHAOS_KILLS", 40);
    let mut rng = rand::rngs::StdRng::seed_from_u64(env_count("EDDY_CHAOS_SEED", 11));
    let started = std::time::Instant::now();
    let dir = scratch("chaos-keyed");
    let data = dir.join("data");
    {
        let s = Server::start(&data, None);
        // No primary key: a row sent twice would count twice.
        deploy(
            &s,
            "CREATE TABLE t (id BIGINT, k BIGINT);
             CREATE MATERIALIZED VIEW v AS SELECT k, COUNT(*) AS n, SUM(id) AS s FROM t GROUP BY k;",
            true,
        );
    }
    let batch = |b: u64| -> String {
        (b * 20..b * 20 + 20)
            .map(|id| json!({"insert": {"id": id, "k": id % 7}}).to_string() + "\n")
            .collect()
    };
    // Batches below `acked` were answered 200. Batch `acked` may have been
    // applied when the server died: it is sent again with its key.
    let mut acked = 0u64;
    for _ in 0..kills {
        let s = Server::start(&data, None);
        let killer = kill_after(&s, std::time::Duration::from_millis(rng.gen_range(10..300)));
        loop {
            match try_keyed(&s.url, &format!("batch-{acked}"), &batch(acked)) {
                Some(200) => acked += 1,
                Some(status) => panic!("batch {acked}: {status}"),
                None => break,
            }
            if acked.is_multiple_of(7) {
                let _ = ureq::post(&format!("{}/v0/pipelines/p/checkpoint", s.url)).call();
            }
        }
        killer.join().unwrap();
    }
    let s = Server::start(&data, None);
    wait_running(&s);
    // The batch in flight at the last kill, resent, then one more.
    for _ in 0..2 {
        assert_eq!(
            try_keyed(&s.url, &format!("batch-{acked}"), &batch(acked)),
            Some(200)
        );
        acked += 1;
    }
    let total = (acked * 20) as i64;
    let expected: Vec<Value> = (0..7)
        .map(|k| {
            let ids = (0..total).filter(|i| i % 7 == k);
            json!({"k": k, "n": ids.clone().count(), "s": ids.sum::<i64>()})
        })
        .collect();
    wait_until("every batch to be processed", || {
        s.query("p", "SELECT SUM(n) AS n FROM v")[0]["n"] == json!(total)
    });
    let view = s.query("p", "SELECT k, n, s FROM v ORDER BY k");
    assert_eq!(view, expected, "after {kills} kills, {acked} batches");
    eprintln!(
        "{kills} kills, {acked} batches of 20 rows, {:.1} s: every row once",
        started.elapsed().as_secs_f64()
    );
}

/// The state operators keep (entries), leaving out the kept contents of
/// views (a view's output, which grows by design), and the process's RSS.
fn state_and_rss(s: &Server) -> (u64, u64) {
    let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
    let entries = stats["operators"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| {
            !o["operator"]
                .as_str()
                .unwrap_or("")
                .starts_with("view contents")
        })
        .map(|o| o["entries"].as_u64().unwrap())
        .sum();
    (
        entries,
        stats["global_metrics"]["rss_bytes"].as_u64().unwrap(),
    )
}

#[test]
fn a_stream_with_lateness_keeps_its_state_flat_under_load() {
    // The long form: EDDY_SOAK_SECONDS=3600.
    let seconds = env_count("EDDY_SOAK_SECONDS", 10);
    let dir = scratch("soak");
    let s = Server::start(&dir.join("data"), None);
    // MAX keeps the rows of each open window; LATENESS lets the closed
    // ones go. Without it the state would grow with every row.
    deploy(
        &s,
        "CREATE TABLE t (ts BIGINT NOT NULL LATENESS 20, price BIGINT);
         CREATE MATERIALIZED VIEW w AS SELECT window_start, COUNT(*) AS n, MAX(price) AS hi
           FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), 10)) GROUP BY window_start;",
        true,
    );
    // Batch b: window b's 1,000 rows (ts 10b to 10b + 9), less a few held
    // back to the next batch, so that they arrive up to 19 units late
    // (within the lateness: none is dropped).
    let rows = |b: i64, held_back: bool| -> Vec<String> {
        (0..1000)
            .filter(|i| (i % 97 == 0) == held_back)
            .map(|i| {
                let ts = b * 10 + i / 100;
                json!({"insert": {"ts": ts, "price": ts}}).to_string() + "\n"
            })
            .collect()
    };
    let batch = |b: i64| -> String {
        let mut text = rows(b, false).concat();
        if b > 0 {
            text.push_str(&rows(b - 1, true).concat());
        }
        text
    };
    let started = std::time::Instant::now();
    let mut samples: Vec<(u64, u64)> = Vec::new();
    let mut sent = 0i64;
    let mut last_sample = started;
    while started.elapsed().as_secs() < seconds {
        let v = s.ok(
            "POST",
            "/v0/pipelines/p/ingress/t?format=json&update_format=insert_delete",
            Some(&batch(sent)),
        );
        sent += 1;
        if last_sample.elapsed().as_millis() >= 500 {
            s.wait_token("p", v["token"].as_str().unwrap());
            samples.push(state_and_rss(&s));
            last_sample = std::time::Instant::now();
        }
    }
    assert!(samples.len() >= 8, "too few samples: {samples:?}");
    let half = samples.len() / 2;
    let first = samples[1..half].iter().map(|s| s.0).max().unwrap();
    let last = samples[half..].iter().map(|s| s.0).max().unwrap();
    let rss = |part: &[(u64, u64)]| part.iter().map(|s| s.1).max().unwrap() >> 20;
    eprintln!(
        "{sent} batches of 1,000 rows in {seconds} s: state entries {first} (first half) {last} (second half), peak RSS {} MiB then {} MiB",
        rss(&samples[1..half]),
        rss(&samples[half..])
    );
    // Flat: the open windows only, whatever the rows sent.
    assert!(
        last <= first + (first / 2).max(200),
        "the state grows: {samples:?}"
    );
    // And right: every window whose late rows were sent is whole.
    let whole = sent - 1;
    let got = s.query(
        "p",
        &format!(
            "SELECT COUNT(*) AS k, MIN(n) AS lo, MAX(n) AS hi FROM w WHERE window_start < {}",
            whole * 10
        ),
    );
    assert_eq!(got, vec![json!({"k": whole, "lo": 1000, "hi": 1000})]);
}
