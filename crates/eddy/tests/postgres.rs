//! `postgres_output` and `postgres_cdc_input` against a real PostgreSQL server: Debian's (installed
//! by `scripts/test-tools.sh`), started in a scratch data directory on a
//! free loopback port, as the `postgres` user when the tests run as root
//! (PostgreSQL refuses to run as root), and stopped with the test.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, scratch, wait_until, Scratch, Server};
use serde_json::json;

/// A PostgreSQL server; stopped when dropped.
struct Postgres {
    child: Child,
    port: u16,
    bin: PathBuf,
    data: PathBuf,
    /// Where the test's psql connects: its socket folder (a server that
    /// takes TCP only over TLS with a client certificate) or 127.0.0.1.
    host: String,
    _dir: Scratch,
}

/// A server that takes connections over TCP only with TLS and a client
/// certificate: the certificates' folder (`ca.crt`, the server's for
/// `localhost`, and `client.crt`/`client.key`, CN `eddy`).
struct Tls(PathBuf);

/// Makes a CA, the server's certificate and a client's with openssl.
fn certificates(dir: &Path) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl runs (scripts/test-tools.sh installs it)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=eddy-test-ca",
    ]);
    for (name, cn, san) in [
        ("server", "localhost", "DNS:localhost"),
        ("client", "eddy", "DNS:eddy"),
    ] {
        std::fs::write(
            dir.join(format!("{name}.ext")),
            format!("subjectAltName={san}\n"),
        )
        .unwrap();
        openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={cn}"),
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &format!("{name}.crt"),
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
        ]);
    }
}

/// The folder of PostgreSQL's programs: `EDDY_PG_BIN`, or Debian's newest.
fn pg_bin() -> PathBuf {
    if let Ok(p) = std::env::var("EDDY_PG_BIN") {
        return PathBuf::from(p);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("postgres").exists())
        .collect();
    found.sort();
    found.pop().expect(
        "PostgreSQL's server is missing: run `scripts/test-tools.sh` once (it installs Debian's postgresql), or set EDDY_PG_BIN",
    )
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A command of PostgreSQL's, run as `postgres` when the tests are root.
fn pg_command(bin: &Path, program: &str) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin.join(program));
        c
    } else {
        Command::new(bin.join(program))
    }
}

impl Postgres {
    fn start() -> Self {
        Self::start_with(None)
    }

    fn start_with(tls: Option<&Tls>) -> Self {
        static SERVERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = SERVERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let bin = pg_bin();
        let dir = scratch(&format!("pg-server-{n}"));
        let data = dir.join("data");
        if is_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&*dir)
                .status()
                .unwrap();
            assert!(status.success(), "chown of the scratch folder");
        }
        let out = pg_command(&bin, "initdb")
            .args([
                "-U",
                "eddy",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "-D",
            ])
            .arg(&data)
            .output()
            .expect("initdb runs");
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = free_port();
        let mut server = pg_command(&bin, "postgres");
        server
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(&*dir)
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            // Logical replication, for postgres_cdc_input.
            .args(["-c", "wal_level=logical"]);
        let mut host = "127.0.0.1".to_string();
        if let Some(Tls(certs)) = tls {
            for f in ["ca.crt", "server.crt", "server.key"] {
                std::fs::copy(certs.join(f), data.join(f)).unwrap();
            }
            std::fs::write(
                data.join("pg_hba.conf"),
                // `reader` over TLS without a client certificate (for
                // postgres_cdc_input, which has no such setting); anyone
                // else with one.
                "local all all trust\nhostssl all reader 127.0.0.1/32 trust\n\
                 hostssl all all 127.0.0.1/32 trust clientcert=verify-full\n",
            )
            .unwrap();
            if is_root() {
                let status = Command::new("chown")
                    .args(["-R", "postgres"])
                    .arg(&data)
                    .status()
                    .unwrap();
                assert!(status.success());
            }
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                data.join("server.key"),
                std::fs::Permissions::from_mode(0o600),
            )
            .unwrap();
            server.args([
                "-c",
                "ssl=on",
                "-c",
                "ssl_cert_file=server.crt",
                "-c",
                "ssl_key_file=server.key",
                "-c",
                "ssl_ca_file=ca.crt",
            ]);
            host = dir.to_string_lossy().into_owned();
        }
        let child = server
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("postgres starts");
        let pg = Self {
            child,
            port,
            bin,
            data,
            host,
            _dir: dir,
        };
        let started = Instant::now();
        while pg.try_sql("SELECT 1").is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "PostgreSQL answers"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        pg
    }

    fn try_sql(&self, sql: &str) -> Result<String, String> {
        let out = Command::new(self.bin.join("psql"))
            .args(["-h", &self.host, "-p", &self.port.to_string()])
            .args([
                "-U",
                "eddy",
                "-d",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-At",
                "-c",
                sql,
            ])
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).to_string())
        }
    }

    fn sql(&self, sql: &str) -> String {
        self.try_sql(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    fn uri(&self) -> String {
        format!("postgres://eddy@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // The server runs under runuser, which passes no signal on: stop
        // it by its data folder (an immediate stop: the data is scratch).
        let _ = pg_command(&self.bin, "pg_ctl")
            .args(["-m", "immediate", "-w", "stop", "-D"])
            .arg(&self.data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A new user's flow: a view with a key (CREATE INDEX) kept in a
/// PostgreSQL table by upserts and deletes, through changes that update,
/// delete and re-insert keys, a SIGKILL of the server and its restart; the
/// table ends equal to the view, its other columns keeping their defaults.
#[test]
fn a_view_is_kept_in_a_postgres_table_by_its_key() {
    let pg = Postgres::start();
    pg.sql(
        "CREATE TABLE totals (city TEXT PRIMARY KEY, n BIGINT NOT NULL, amount NUMERIC(20, 2), \
         noted TIMESTAMP DEFAULT '2000-01-01 00:00:00')",
    );
    pg.sql(
        "CREATE TABLE log (city TEXT, n BIGINT, amount NUMERIC(20, 2), __feldera_op TEXT NOT NULL, \
         __feldera_ts BIGINT NOT NULL)",
    );
    let output = json!([{"name": "pg", "index": "totals_key", "transport": {
        "name": "postgres_output", "config": {"uri": pg.uri(), "table": "totals"}}},
        {"name": "log", "index": "totals_key", "transport": {
        "name": "postgres_output", "config": {"uri": pg.uri(), "table": "log", "mode": "cdc"}}}]);
    let sql = format!(
        "CREATE TABLE sales (id BIGINT NOT NULL PRIMARY KEY, city VARCHAR NOT NULL, amount DECIMAL(10, 2));
         CREATE MATERIALIZED VIEW totals WITH ('connectors' = '{output}') AS
           SELECT city, COUNT(*) AS n, SUM(amount) AS amount FROM sales GROUP BY city;
         CREATE INDEX totals_key ON totals(city);"
    );
    let dir = scratch("pg-out");
    let table = |pg: &Postgres| {
        pg.sql("SELECT city || ',' || n || ',' || COALESCE(amount::text, 'null') || ',' || noted FROM totals ORDER BY city")
    };
    {
        let s = Server::start(&dir, None);
        let body = json!({
            "program_code": sql,
            // Only the checkpoint asked for: the step after it is replayed.
            "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 3600}},
        });
        s.ok("PUT", "/v0/pipelines/p", Some(&body.to_string()));
        s.ok("POST", "/v0/pipelines/p/start", None);
        s.ingest(
            "p",
            "sales",
            "format=json",
            r#"{"insert": {"id": 1, "city": "Oslo", "amount": 10.50}}
{"insert": {"id": 2, "city": "Oslo", "amount": 2}}
{"insert": {"id": 3, "city": "Lima", "amount": null}}
{"insert": {"id": 4, "city": "Pune", "amount": 7}}"#,
        );
        wait_until("the first rows", || {
            table(&pg)
                == "Lima,1,null,2000-01-01 00:00:00\nOslo,2,12.50,2000-01-01 00:00:00\nPune,1,7.00,2000-01-01 00:00:00"
        });
        // An update of a key (one upsert), a key deleted, one added.
        s.ingest(
            "p",
            "sales",
            "format=json",
            r#"{"delete": {"id": 2, "city": "Oslo", "amount": 2}}
{"delete": {"id": 4, "city": "Pune", "amount": 7}}
{"insert": {"id": 5, "city": "Kyiv", "amount": 1}}"#,
        );
        wait_until("the update", || {
            table(&pg)
                == "Kyiv,1,1.00,2000-01-01 00:00:00\nLima,1,null,2000-01-01 00:00:00\nOslo,1,10.50,2000-01-01 00:00:00"
        });
        let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
        assert_eq!(
            stats["outputs"][0]["metrics"]["num_transport_errors"], 0,
            "{stats}"
        );
        s.ok("POST", "/v0/pipelines/p/checkpoint", None);
        s.ingest(
            "p",
            "sales",
            "format=json",
            r#"{"insert": {"id": 6, "city": "Pune", "amount": 3}}"#,
        );
        wait_until("after the checkpoint", || {
            table(&pg).contains("Pune,1,3.00")
        });
        // SIGKILL: the server is dropped.
    }
    let s = Server::start(&dir, None);
    wait_until("running again", || {
        s.ok("GET", "/v0/pipelines/p", None)["deployment_status"] == "Running"
    });
    s.ingest(
        "p",
        "sales",
        "format=json",
        r#"{"insert": {"id": 7, "city": "Lima", "amount": 5}}"#,
    );
    let expected = "Kyiv,1,1.00,2000-01-01 00:00:00\nLima,2,5.00,2000-01-01 00:00:00\nOslo,1,10.50,2000-01-01 00:00:00\nPune,1,3.00,2000-01-01 00:00:00";
    wait_until("after the restart", || table(&pg) == expected);
    let view: Vec<String> = s
        .query("p", "SELECT city, n FROM totals ORDER BY city")
        .iter()
        .map(|r| format!("{},{}", r["city"].as_str().unwrap(), r["n"]))
        .collect();
    assert_eq!(
        view.join("\n"),
        pg.sql("SELECT city || ',' || n FROM totals ORDER BY city")
    );
    // The change log: per key, i, then u or d, then i again after a d;
    // the step replayed after the SIGKILL is there once.
    wait_until("the log's last step", || {
        pg.sql("SELECT count(*) FROM log WHERE city = 'Lima' AND n = 2") == "1"
    });
    let log = pg
        .sql("SELECT city || ',' || __feldera_op || ',' || n FROM log ORDER BY __feldera_ts, city");
    let mut present = std::collections::BTreeMap::new();
    for line in log.lines() {
        let parts: Vec<&str> = line.split(',').collect();
        let was = present.insert(parts[0].to_string(), parts[1] != "d");
        let ok = match parts[1] {
            "i" => was != Some(true),
            "u" | "d" => was == Some(true),
            _ => false,
        };
        assert!(
            ok,
            "'{line}' does not follow from the log before it:\n{log}"
        );
    }
    let last = pg.sql(
        "SELECT string_agg(city || ',' || n, E'\\n' ORDER BY city) FROM \
         (SELECT DISTINCT ON (city) city, n, __feldera_op FROM log ORDER BY city, __feldera_ts DESC) AS l \
         WHERE __feldera_op <> 'd'",
    );
    assert_eq!(last, view.join("\n"));
    s.ok("POST", "/v0/pipelines/p/stop?force=true", None);
}

/// A view without a key, an index on another view, and an index that is
/// not defined are refused when the program is; a table that is not there
/// is an error of the connector, retried, and the rows arrive once it is.
#[test]
fn keys_are_checked_and_a_missing_table_is_retried() {
    let pg = Postgres::start();
    let dir = scratch("pg-refused");
    let s = Server::start(&dir, None);
    let out = |index: &str| json!([{"index": index, "transport": {"name": "postgres_output", "config": {"uri": pg.uri(), "table": "later"}}}]);
    let keyless = json!([{"transport": {"name": "postgres_output", "config": {"uri": pg.uri(), "table": "later"}}}]);
    s.deploy_refused(
        "r",
        &format!("CREATE TABLE t (k INT NOT NULL); CREATE VIEW v WITH ('connectors' = '{keyless}') AS SELECT k FROM t;"),
        "CREATE INDEX",
    );
    s.deploy_refused(
        "r",
        &format!("CREATE TABLE t (k INT NOT NULL); CREATE VIEW v WITH ('connectors' = '{}') AS SELECT k FROM t;", out("nope")),
        "no index 'nope'",
    );
    s.deploy_refused(
        "r",
        &format!(
            "CREATE TABLE t (k INT NOT NULL); CREATE VIEW v WITH ('connectors' = '{}') AS SELECT k FROM t;
             CREATE VIEW w AS SELECT k FROM t; CREATE INDEX wk ON w(k);",
            out("wk")
        ),
        "is on view 'w'",
    );
    s.deploy_refused(
        "r",
        "CREATE TABLE t (k INT NOT NULL); CREATE VIEW v AS SELECT k FROM t; CREATE INDEX vk ON v(nope);",
        "no column 'nope'",
    );
    s.deploy(
        "r",
        &format!(
            "CREATE TABLE t (k INT NOT NULL); CREATE VIEW v WITH ('connectors' = '{}') AS SELECT k FROM t; CREATE INDEX vk ON v(k);",
            out("vk")
        ),
    );
    s.ok("POST", "/v0/pipelines/r/start", None);
    s.ingest("r", "t", "format=json", r#"{"insert": {"k": 1}}"#);
    wait_until("the missing table reported", || {
        let stats = s.ok("GET", "/v0/pipelines/r/stats", None);
        stats["outputs"][0]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("later"))
    });
    pg.sql("CREATE TABLE later (k INT PRIMARY KEY)");
    s.ingest("r", "t", "format=json", r#"{"insert": {"k": 2}}"#);
    wait_until("both rows, the waiting one first", || {
        pg.sql("SELECT string_agg(k::text, ',' ORDER BY k) FROM later") == "1,2"
    });
    // The index is not unique: two rows of key 3 in one step; one is
    // written and the other reported, not dropped silently.
    s.ingest(
        "r",
        "t",
        "format=json",
        "{\"insert\": {\"k\": 3}}\n{\"insert\": {\"k\": 3}}",
    );
    wait_until("a key that is not unique reported", || {
        let stats = s.ok("GET", "/v0/pipelines/r/stats", None);
        stats["outputs"][0]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("1 rows share their key"))
    });
    assert_eq!(
        pg.sql("SELECT string_agg(k::text, ',' ORDER BY k) FROM later"),
        "1,2,3"
    );
    s.ok("POST", "/v0/pipelines/r/stop?force=true", None);
}

/// The rows of `orders` as `id,customer,amount,status,tags` lines, from
/// Eddy's table.
fn eddy_orders(s: &Server, pipeline: &str) -> String {
    let rows = s.query(
        pipeline,
        "SELECT id, customer, amount, status, tags FROM orders ORDER BY id, status",
    );
    rows.iter()
        .map(|r| {
            let amount = match &r["amount"] {
                serde_json::Value::Null => "null".to_string(),
                v => format!(
                    "{:.2}",
                    v.as_str()
                        .map_or_else(|| v.as_f64().unwrap(), |t| t.parse().unwrap())
                ),
            };
            format!(
                "{},{},{},{},{}",
                r["id"],
                r["customer"].as_str().unwrap(),
                amount,
                r["status"].as_str().unwrap(),
                r["tags"]
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The same lines from PostgreSQL's table.
fn pg_orders(pg: &Postgres) -> String {
    pg.sql(
        "SELECT id || ',' || customer || ',' || COALESCE(amount::text, 'null') || ',' || status || ',' || \
         COALESCE(array_to_json(tags)::text, 'null') FROM orders ORDER BY id, status",
    )
}

const ORDERS_PG: &str = "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer TEXT NOT NULL, \
    amount NUMERIC(10, 2), status TEXT NOT NULL, tags TEXT[], unused INT DEFAULT 7);
    ALTER TABLE orders REPLICA IDENTITY FULL;";

fn orders_program(pg: &Postgres, publication: &str) -> String {
    let cdc = json!([{"name": "cdc", "transport": {"name": "postgres_cdc_input", "config": {
        "uri": pg.uri(), "publication": publication, "source_table": "public.orders"}}}]);
    format!(
        "CREATE TABLE orders (id BIGINT NOT NULL, customer VARCHAR NOT NULL, amount DECIMAL(10, 2), \
           status VARCHAR NOT NULL, tags VARCHAR ARRAY) WITH ('materialized' = 'true', 'connectors' = '{cdc}');
         CREATE MATERIALIZED VIEW by_status AS SELECT status, COUNT(*) AS n FROM orders GROUP BY status;"
    )
}

/// A new user's flow with `postgres_cdc_input`: a table's rows, then its
/// inserts, updates and deletes, while another client writes to it as the
/// pipeline starts (the snapshot and the stream meet without a row lost
/// or doubled); a checkpoint, changes, a SIGKILL, changes while the server
/// is down, a restart: Eddy's table ends equal to PostgreSQL's.
#[test]
fn a_table_follows_a_postgres_table_by_logical_replication() {
    let pg = Postgres::start();
    pg.sql(ORDERS_PG);
    pg.sql("CREATE PUBLICATION eddy_orders FOR TABLE orders");
    pg.sql(
        "INSERT INTO orders (id, customer, amount, status, tags) SELECT i, 'c' || i, i * 1.25, 'new', \
         ARRAY['a', 'b c'] FROM generate_series(1, 25000) AS i",
    );
    let dir = scratch("pg-cdc");
    {
        let s = Server::start(&dir, None);
        let body = json!({
            "program_code": orders_program(&pg, "eddy_orders"),
            "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 1}},
        });
        s.ok("PUT", "/v0/pipelines/p", Some(&body.to_string()));
        // Another client writes, as fast as it can, while the pipeline
        // makes its slot and takes its snapshot.
        let mut script = String::new();
        for i in 0..3000 {
            script.push_str(&format!(
                "BEGIN; INSERT INTO orders (id, customer, amount, status) VALUES ({}, 'late', 1, 'new'); \
                 UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id = {}; \
                 DELETE FROM orders WHERE id = {}; COMMIT;\n",
                100_000 + i,
                i * 7 % 25_000 + 1,
                i * 11 % 25_000 + 3
            ));
        }
        let mut writer = Command::new(pg.bin.join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &pg.port.to_string(),
                "-U",
                "eddy",
                "-d",
                "postgres",
            ])
            .args(["-v", "ON_ERROR_STOP=1", "-qAt"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = writer.stdin.take().unwrap();
        let feeding = std::thread::spawn(move || {
            use std::io::Write;
            stdin.write_all(script.as_bytes()).unwrap();
        });
        s.ok("POST", "/v0/pipelines/p/start", None);
        feeding.join().unwrap();
        assert!(writer.wait().unwrap().success());
        wait_until("the snapshot and the writes", || {
            eddy_orders(&s, "p") == pg_orders(&pg)
        });
        pg.sql("INSERT INTO orders VALUES (200000, 'Ann', NULL, 'new', '{}', 1)");
        pg.sql("UPDATE orders SET tags = ARRAY['x', NULL], customer = 'Bo' WHERE id = 2");
        pg.sql("DELETE FROM orders WHERE id BETWEEN 10 AND 19");
        wait_until("the changes", || eddy_orders(&s, "p") == pg_orders(&pg));
        let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
        let metrics = &stats["inputs"][0]["metrics"];
        assert_eq!(metrics["num_parse_errors"], 0, "{stats}");
        assert_eq!(metrics["num_transport_errors"], 0, "{stats}");
        s.ok("POST", "/v0/pipelines/p/checkpoint", None);
        pg.sql("UPDATE orders SET status = 'shipped' WHERE id < 100");
        wait_until("after the checkpoint", || {
            eddy_orders(&s, "p") == pg_orders(&pg)
        });
        // SIGKILL: the server is dropped.
    }
    pg.sql("INSERT INTO orders (id, customer, status) VALUES (300000, 'down', 'new')");
    pg.sql("DELETE FROM orders WHERE id BETWEEN 20 AND 29");
    let s = Server::start(&dir, None);
    wait_until("running again", || {
        s.ok("GET", "/v0/pipelines/p", None)["deployment_status"] == "Running"
    });
    wait_until("nothing lost or doubled", || {
        eddy_orders(&s, "p") == pg_orders(&pg)
    });
    let counts = s.query("p", "SELECT status, n FROM by_status ORDER BY status");
    let pg_counts =
        pg.sql("SELECT status || ',' || count(*) FROM orders GROUP BY status ORDER BY status");
    let counts: Vec<String> = counts
        .iter()
        .map(|r| format!("{},{}", r["status"].as_str().unwrap(), r["n"]))
        .collect();
    assert_eq!(counts.join("\n"), pg_counts);
    s.ok("POST", "/v0/pipelines/p/stop?force=true", None);

    // A stopped pipeline keeps its slot for the next start; clearing its
    // storage, or deleting it, drops the slot (it would hold the WAL).
    let slots = || pg.sql("SELECT count(*) FROM pg_replication_slots");
    assert_eq!(slots(), "1");
    s.ok("POST", "/v0/pipelines/p/clear", None);
    wait_until("the slot dropped with the state", || slots() == "0");
    s.ok("POST", "/v0/pipelines/p/start", None);
    wait_until("read again from a new slot", || {
        eddy_orders(&s, "p") == pg_orders(&pg)
    });
    s.ok("POST", "/v0/pipelines/p/stop?force=true", None);
    assert_eq!(slots(), "1");
    s.ok("DELETE", "/v0/pipelines/p", None);
    wait_until("the slot dropped with the pipeline", || slots() == "0");
}

/// What goes wrong is reported and, where it can be, tried again: a
/// publication that is not there yet, a table without whole old rows; a
/// pipeline without fault tolerance drops its slot when it stops; a
/// TRUNCATE stops the connector with an error.
#[test]
fn cdc_mistakes_are_reported_and_retried() {
    let pg = Postgres::start();
    pg.sql(ORDERS_PG);
    pg.sql("ALTER TABLE orders REPLICA IDENTITY DEFAULT");
    pg.sql("INSERT INTO orders (id, customer, status) VALUES (1, 'a', 'new')");
    let dir = scratch("pg-cdc-errors");
    let s = Server::start(&dir, None);
    s.deploy("q", &orders_program(&pg, "later"));
    s.ok("POST", "/v0/pipelines/q/start", None);
    let error = || {
        let stats = s.ok("GET", "/v0/pipelines/q/stats", None);
        stats["inputs"][0]["last_error"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    wait_until("the identity reported", || {
        error().contains("REPLICA IDENTITY FULL")
    });
    pg.sql("ALTER TABLE orders REPLICA IDENTITY FULL");
    wait_until("the publication reported", || {
        error().contains("publication 'later'")
    });
    pg.sql("CREATE PUBLICATION later FOR TABLE orders");
    pg.sql("INSERT INTO orders (id, customer, status) VALUES (2, 'b', 'new')");
    wait_until("the rows", || eddy_orders(&s, "q") == pg_orders(&pg));
    assert_eq!(pg.sql("SELECT count(*) FROM pg_replication_slots"), "1");
    pg.sql("TRUNCATE orders");
    wait_until("the truncate reported", || error().contains("truncated"));
    s.ok("POST", "/v0/pipelines/q/stop?force=true", None);
    wait_until("the slot dropped", || {
        pg.sql("SELECT count(*) FROM pg_replication_slots") == "0"
    });
}

/// `postgres_input` (Feldera's): a query's rows, with a column renamed and
/// a constant, fill a table once; after a checkpoint, a SIGKILL and a
/// restart the rows are there once and the query is not run again. A
/// query that fails is an error in the connector's status.
#[test]
fn a_query_fills_a_table_once() {
    let pg = Postgres::start();
    pg.sql("CREATE TABLE people (id INT PRIMARY KEY, name TEXT, age BIGINT)");
    pg.sql("INSERT INTO people SELECT i, 'p' || i, i % 90 FROM generate_series(1, 25000) AS i");
    let input = |query: &str| {
        json!([{"name": "q", "transport": {"name": "postgres_input", "config": {
            "uri": pg.uri(), "query": query}}}])
    };
    let program = |query: &str| {
        format!(
            "CREATE TABLE people (id INT NOT NULL, name VARCHAR, the_age BIGINT, extra BIGINT NOT NULL) \
             WITH ('connectors' = '{}');
             CREATE MATERIALIZED VIEW s AS
               SELECT COUNT(*) AS n, SUM(the_age) AS ages, SUM(extra) AS extras FROM people;",
            input(query)
        )
    };
    let sql = program("select id, name, age as the_age, 1 as extra from people;");
    let want = pg.sql("SELECT count(*) || ',' || sum(age) || ',' || count(*) FROM people");
    let summary = |s: &Server| {
        s.query("p", "SELECT n, ages, extras FROM s")
            .first()
            .map(|r| format!("{},{},{}", r["n"], r["ages"], r["extras"]))
            .unwrap_or_default()
    };
    let ended = |s: &Server, p: &str| {
        s.ok("GET", &format!("/v0/pipelines/{p}/stats"), None)["inputs"][0]["metrics"]
            ["end_of_input"]
            == true
    };
    let dir = scratch("pg-query");
    {
        let s = Server::start(&dir, None);
        let body = json!({
            "program_code": sql,
            "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 3600}},
        });
        s.ok("PUT", "/v0/pipelines/p", Some(&body.to_string()));
        s.ok("POST", "/v0/pipelines/p/start", None);
        wait_until("the query's rows", || summary(&s) == want && ended(&s, "p"));
        s.ok("POST", "/v0/pipelines/p/checkpoint", None);
        // SIGKILL: the server is dropped.
    }
    pg.sql("INSERT INTO people VALUES (100000, 'late', 1)");
    let s = Server::start(&dir, None);
    wait_until("running again, the input ended", || {
        s.ok("GET", "/v0/pipelines/p", None)["deployment_status"] == "Running" && ended(&s, "p")
    });
    assert_eq!(summary(&s), want, "the rows once, the query not run again");
    s.ok("POST", "/v0/pipelines/p/stop?force=true", None);

    s.deploy("bad", &program("select nope from people"));
    s.ok("POST", "/v0/pipelines/bad/start", None);
    wait_until("the failing query reported", || {
        let stats = s.ok("GET", "/v0/pipelines/bad/stats", None);
        stats["inputs"][0]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("nope"))
    });
    s.ok("POST", "/v0/pipelines/bad/stop?force=true", None);
}

/// TLS, with Feldera's settings: `postgres_input` reads from a server that
/// takes TCP only over TLS with a client certificate, given as PEM text or
/// as files; its certificate is for `localhost`, so connecting to
/// 127.0.0.1 needs `verify_hostname: false`, and without it, or without
/// TLS, or with another CA, the connector's status says why.
#[test]
fn tls_connects_with_feldera_settings() {
    let dir = scratch("pg-tls");
    let certs = dir.join("files/certs");
    std::fs::create_dir_all(&certs).unwrap();
    certificates(&certs);
    let pg = Postgres::start_with(Some(&Tls(certs.clone())));
    pg.sql("CREATE TABLE t (id INT PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 100)");
    let pem = |f: &str| std::fs::read_to_string(certs.join(f)).unwrap();
    let s = Server::start(&dir, None);
    let run = |name: &str, tls: serde_json::Value| {
        let mut config = json!({"uri": pg.uri(), "query": "SELECT id FROM t"});
        config
            .as_object_mut()
            .unwrap()
            .extend(tls.as_object().unwrap().clone());
        let c = json!([{"transport": {"name": "postgres_input", "config": config}}]);
        s.deploy(
            name,
            &format!("CREATE TABLE t (id INT NOT NULL) WITH ('materialized' = 'true', 'connectors' = '{c}');"),
        );
        s.ok("POST", &format!("/v0/pipelines/{name}/start"), None);
    };
    // Waits for the input's error to say `needle`, showing the last one
    // seen when it does not.
    let reported = |name: &str, needle: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let stats = s.ok("GET", &format!("/v0/pipelines/{name}/stats"), None);
            let error = stats["inputs"][0]["last_error"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if error.contains(needle) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: no error saying {needle:?}; the last: {error:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let count = |name: &str| s.query(name, "SELECT COUNT(*) AS n FROM t")[0]["n"].clone();

    run(
        "pems",
        json!({"ssl_ca_pem": pem("ca.crt"), "ssl_client_pem": pem("client.crt"),
                       "ssl_client_key": pem("client.key"), "verify_hostname": false}),
    );
    wait_until("the rows over TLS", || count("pems") == 100);
    run(
        "files",
        json!({"ssl_ca_location": "certs/ca.crt", "ssl_client_location": "certs/client.crt",
                        "ssl_client_key_location": "certs/client.key", "verify_hostname": false}),
    );
    wait_until("the rows over TLS, certificates from files", || {
        count("files") == 100
    });

    run(
        "name",
        json!({"ssl_ca_pem": pem("ca.crt"), "ssl_client_pem": pem("client.crt"),
                       "ssl_client_key": pem("client.key")}),
    );
    reported("name", "not valid for name");
    run("plain", json!({}));
    reported("plain", "no pg_hba.conf entry");
    run(
        "other-ca",
        json!({"ssl_ca_pem": pem("client.crt"), "ssl_client_pem": pem("client.crt"),
                           "ssl_client_key": pem("client.key"), "verify_hostname": false}),
    );
    reported("other-ca", "UnknownIssuer");
    assert_eq!(count("name"), 0);

    s.deploy_refused(
        "bad",
        &format!(
            "CREATE TABLE t (id INT) WITH ('connectors' = '{}');",
            json!([{"transport": {"name": "postgres_input", "config": {
                "uri": pg.uri(), "query": "SELECT 1", "ssl_ca_location": "/etc/ssl/certs/ca.pem"}}}])
        ),
        "outside the folders",
    );

    // A table fed by logical replication as `reader` (the CA alone, the
    // server's name checked: `localhost` at its address), and a view of it
    // kept in a PostgreSQL table with a client certificate: the snapshot,
    // then new rows, both ways over TLS.
    pg.sql(
        "CREATE ROLE reader LOGIN SUPERUSER REPLICATION; ALTER TABLE t REPLICA IDENTITY FULL; \
         CREATE PUBLICATION pub FOR TABLE t; \
         CREATE TABLE copied (id INT PRIMARY KEY)",
    );
    let cdc = json!([{"transport": {"name": "postgres_cdc_input", "config": {
        "uri": format!("postgres://reader@localhost:{}/postgres?hostaddr=127.0.0.1", pg.port),
        "publication": "pub", "source_table": "public.t", "ssl_ca_pem": pem("ca.crt")}}}]);
    let out = json!([{"index": "v_id", "transport": {"name": "postgres_output", "config": {
        "uri": pg.uri(), "table": "copied", "ssl_ca_pem": pem("ca.crt"),
        "ssl_client_pem": pem("client.crt"), "ssl_client_key": pem("client.key"),
        "verify_hostname": false}}}]);
    s.deploy(
        "both",
        &format!(
            "CREATE TABLE t (id INT NOT NULL PRIMARY KEY) WITH ('connectors' = '{cdc}');
             CREATE VIEW v WITH ('connectors' = '{out}') AS SELECT id FROM t;
             CREATE INDEX v_id ON v(id);"
        ),
    );
    s.ok("POST", "/v0/pipelines/both/start", None);
    let copied = |n: &str, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while pg.sql("SELECT count(*) FROM copied") != n {
            let stats = s.ok("GET", "/v0/pipelines/both/stats", None);
            assert!(Instant::now() < deadline, "{what}: {stats}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    copied("100", "the snapshot copied over TLS");
    pg.sql("INSERT INTO t SELECT generate_series(101, 110)");
    copied("110", "new rows streamed and copied over TLS");
    s.ok("POST", "/v0/pipelines/both/stop?force=true", None);
}
