//! Kafka round trip against a real Kafka-protocol broker (tansu, installed
//! by `scripts/test-tools.sh`) on loopback: topic → table → view → topic,
//! and a restarted pipeline resuming from its checkpoint's offsets without
//! losing or duplicating input.

mod common;

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, scratch, tool, wait_until, Server};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::{json, Value};

struct Broker {
    child: Child,
    servers: String,
}

impl Broker {
    fn start() -> Self {
        let tansu = tool("EDDY_TANSU", "tansu/bin/tansu");
        let port = free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(tansu)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tansu starts");
        let servers = format!("127.0.0.1:{port}");
        wait_until("broker port", || TcpStream::connect(&servers).is_ok());
        Self { child, servers }
    }

    fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.servers);
        c
    }

    fn create_topics(&self, names: &[&str]) {
        self.create_topics_with(names, 1);
    }

    fn create_topics_with(&self, names: &[&str], partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = self.config().create().unwrap();
        let topics: Vec<NewTopic> = names
            .iter()
            .map(|n| NewTopic::new(n, partitions, TopicReplication::Fixed(1)))
            .collect();
        let rt = futures::executor::block_on(admin.create_topics(&topics, &AdminOptions::new()));
        for r in rt.expect("create topics") {
            r.expect("topic created");
        }
    }

    fn produce(&self, topic: &str, lines: &[Value]) {
        let producer: BaseProducer = self.config().create().unwrap();
        for l in lines {
            let payload = l.to_string();
            producer
                .send(BaseRecord::<(), str>::to(topic).payload(&payload))
                .expect("queued");
        }
        producer.flush(Duration::from_secs(30)).expect("delivered");
    }

    /// Writes [`order`]s `ids`, one message a batch: after a batch of
    /// several, tansu (the test's broker) gives a high watermark of one
    /// past the batch's first offset, where Kafka gives one past its last.
    fn produce_orders_one_by_one(&self, topic: &str, ids: std::ops::RangeInclusive<i64>) {
        for id in ids {
            self.produce(topic, &[order(id)]);
        }
    }

    fn produce_bytes(&self, topic: &str, messages: &[&[u8]]) {
        let producer: BaseProducer = self.config().create().unwrap();
        for m in messages {
            producer
                .send(BaseRecord::<(), [u8]>::to(topic).payload(m))
                .expect("queued");
        }
        producer.flush(Duration::from_secs(30)).expect("delivered");
    }

    /// Reads `topic` from the start until `n` lines arrived (and a little
    /// longer, to catch extra ones).
    fn read(&self, topic: &str, n: usize) -> Vec<Value> {
        let consumer: BaseConsumer = self
            .config()
            .set("group.id", format!("reader-{}", free_port()))
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        consumer.subscribe(&[topic]).unwrap();
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut settle: Option<Instant> = None;
        loop {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                let text = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
                out.extend(
                    text.lines()
                        .map(|l| serde_json::from_str::<Value>(l).unwrap()),
                );
            }
            if out.len() >= n && settle.is_none() {
                settle = Some(Instant::now() + Duration::from_millis(1500));
            }
            if settle.is_some_and(|s| Instant::now() > s) {
                return out;
            }
            assert!(
                Instant::now() < deadline,
                "expected {n} records on {topic}, got {out:?}"
            );
        }
    }

    /// Reads all of `topic`, as a `read_committed` consumer, until nothing
    /// new arrived for a while.
    fn read_all(&self, topic: &str) -> Vec<Value> {
        let consumer: BaseConsumer = self
            .config()
            .set("group.id", format!("reader-{}", free_port()))
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .unwrap();
        consumer.subscribe(&[topic]).unwrap();
        let mut out = Vec::new();
        let mut last = Instant::now();
        while last.elapsed() < Duration::from_secs(3) {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                let text = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
                out.extend(
                    text.lines()
                        .map(|l| serde_json::from_str::<Value>(l).unwrap()),
                );
                last = Instant::now();
            }
        }
        out
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn order(id: i64) -> Value {
    json!({"insert": {"id": id, "item": format!("item{id}"), "qty": id * 10}})
}

#[test]
fn kafka_round_trip_and_resume_from_checkpointed_offsets() {
    let broker = Broker::start();
    broker.create_topics(&["orders_in", "big_out"]);
    broker.produce("orders_in", &(1..=5).map(order).collect::<Vec<_>>());

    let input = json!([{
        "transport": {"name": "kafka_input", "config": {
            "bootstrap.servers": broker.servers, "topic": "orders_in", "start_from": "earliest"}},
        "format": {"name": "json", "config": {"update_format": "insert_delete"}}
    }]);
    let output = json!([{
        "transport": {"name": "kafka_output", "config": {
            "bootstrap.servers": broker.servers, "topic": "big_out"}},
        "format": {"name": "json"}
    }]);
    let sql = format!(
        "CREATE TABLE orders (id BIGINT, item VARCHAR, qty INT) WITH ('materialized' = 'true', 'connectors' = '{input}');
         CREATE VIEW big WITH ('connectors' = '{output}') AS SELECT id, qty FROM orders WHERE qty >= 20;"
    );
    let dir = scratch("kafka");
    let s = Server::start(&dir, None);
    s.deploy("k", &sql);
    s.ok("POST", "/v0/pipelines/k/start", None);
    let first = broker.read("big_out", 4);
    let ids = |records: &[Value]| -> BTreeMap<i64, usize> {
        let mut m = BTreeMap::new();
        for r in records {
            *m.entry(r["insert"]["id"].as_i64().expect("an insert"))
                .or_default() += 1;
        }
        m
    };
    assert_eq!(ids(&first), (2..=5).map(|i| (i, 1)).collect());

    // Stop, add input while stopped, start again: the state resumes from
    // the checkpoint the stop wrote, and only the new messages are read
    // (from the offsets recorded in that checkpoint).
    s.ok("POST", "/v0/pipelines/k/stop", None);
    broker.produce("orders_in", &(6..=8).map(order).collect::<Vec<_>>());
    s.ok("POST", "/v0/pipelines/k/start", None);
    wait_until("new input", || {
        s.query("k", "SELECT COUNT(*) AS c FROM orders") == vec![json!({"c": 8})]
    });
    let ids_after: Vec<Value> = s.query("k", "SELECT id FROM orders ORDER BY id");
    assert_eq!(
        ids_after,
        (1..=8).map(|id| json!({"id": id})).collect::<Vec<_>>()
    );
    let all = broker.read("big_out", 7);
    assert_eq!(ids(&all), (2..=8).map(|i| (i, 1)).collect(), "{all:?}");
    let stats = s.ok("GET", "/v0/pipelines/k/stats", None);
    assert_eq!(stats["inputs"][0]["metrics"]["total_records"], 3);
    assert_eq!(stats["outputs"][0]["metrics"]["transmitted_records"], 3);
    s.ok("POST", "/v0/pipelines/k/stop?force=true", None);
}

/// `start_from: latest` under exactly-once fault tolerance: the end it
/// started at is in a checkpoint taken before any message came, so after
/// a SIGKILL the pipeline reads what was written after that start (and
/// never what was there before it), not only what comes after the
/// restart.
#[test]
fn a_latest_start_is_kept_by_a_checkpoint_before_any_message() {
    let broker = Broker::start();
    broker.create_topics(&["late_in"]);
    let produce = |ids| broker.produce_orders_one_by_one("late_in", ids);
    produce(1..=3);
    let input = json!([{
        "transport": {"name": "kafka_input", "config": {
            "bootstrap.servers": broker.servers, "topic": "late_in", "start_from": "latest"}},
        "format": {"name": "json", "config": {"update_format": "insert_delete"}}
    }]);
    let body = json!({
        "program_code": format!(
            "CREATE TABLE orders (id BIGINT, item VARCHAR, qty INT) WITH ('materialized' = 'true', 'connectors' = '{input}');"
        ),
        "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 3600}},
    });
    let ids = |s: &Server| -> Vec<i64> {
        s.query("k", "SELECT id FROM orders ORDER BY id")
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect()
    };
    let dir = scratch("kafka-latest");
    {
        let s = Server::start(&dir, None);
        s.ok("PUT", "/v0/pipelines/k", Some(&body.to_string()));
        s.ok("POST", "/v0/pipelines/k/start", None);
        s.wait_start_recorded("k");
        s.ok("POST", "/v0/pipelines/k/checkpoint", None);
        produce(4..=6);
        wait_until("the messages after the start", || ids(&s) == [4, 5, 6]);
        // SIGKILL: the server is dropped.
    }
    produce(7..=8);
    let s = Server::start(&dir, None);
    wait_until("every message after the first start, once", || {
        s.ok("GET", "/v0/pipelines/k", None)["deployment_status"] == "Running"
            && ids(&s) == [4, 5, 6, 7, 8]
    });
    s.ok("POST", "/v0/pipelines/k/stop?force=true", None);
}

/// A producer of numbered events, `{"id": i, "k": i % 7}`, in bursts of
/// 50, until told to stop; returns how many it wrote.
fn produce_events(
    servers: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<i64> {
    std::thread::spawn(move || {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .create()
            .unwrap();
        let mut next = 0i64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let burst: String = (next..next + 50)
                .map(|i| json!({"insert": {"id": i, "k": i % 7}}).to_string() + "\n")
                .collect();
            producer
                .send(BaseRecord::<(), str>::to("events_in").payload(&burst))
                .expect("queued");
            producer.poll(Duration::ZERO);
            next += 50;
            std::thread::sleep(Duration::from_millis(10));
        }
        producer.flush(Duration::from_secs(30)).expect("delivered");
        next
    })
}

#[test]
fn kafka_in_and_out_exactly_once_through_a_hundred_kills() {
    use rand::{Rng, SeedableRng};
    let broker = Broker::start();
    broker.create_topics(&["events_in"]);
    broker.create_topics_with(&["totals_out"], 3);
    let input = json!([{
        "name": "in",
        "transport": {"name": "kafka_input", "config": {
            "bootstrap.servers": broker.servers, "topic": "events_in"}},
        "format": {"name": "json", "config": {"update_format": "insert_delete"}}
    }]);
    let output = json!([{
        "name": "out",
        "transport": {"name": "kafka_output", "config": {
            "bootstrap.servers": broker.servers, "topic": "totals_out", "records_per_message": 3}},
        "format": {"name": "json"}
    }]);
    let sql = format!(
        "CREATE TABLE events (id BIGINT, k BIGINT) WITH ('connectors' = '{input}');
         CREATE MATERIALIZED VIEW totals WITH ('connectors' = '{output}') AS
           SELECT k, COUNT(*) AS n, SUM(id) AS s FROM events GROUP BY k;"
    );
    let dir = scratch("kafka-chaos");
    {
        let s = Server::start(&dir, None);
        let body = json!({
            "program_code": sql,
            "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 1}},
        });
        s.ok("PUT", "/v0/pipelines/k", Some(&body.to_string()));
        s.ok("POST", "/v0/pipelines/k/start", None);
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = produce_events(broker.servers.clone(), std::sync::Arc::clone(&stop));
    let seed: u64 = std::env::var("EDDY_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let started = Instant::now();
    let mut kills = 0;
    // The long form: EDDY_CHAOS_KILLS=1000 (docs/server.md, "The fault suite").
    let wanted = common::env_count("EDDY_CHAOS_KILLS", 100);
    while kills < wanted {
        let s = Server::start(&dir, None);
        // Some new input in, a checkpoint, then SIGKILL at a random moment:
        // during steps, a checkpoint or the sending of its output.
        let seen = |s: &Server| {
            s.query("k", "SELECT SUM(n) AS n FROM totals")
                .first()
                .and_then(|r| r["n"].as_i64())
                .unwrap_or(0)
        };
        let before = seen(&s);
        wait_until("new input", || seen(&s) > before);
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..300)));
        let _ = ureq::post(&format!("{}/v0/pipelines/k/checkpoint", s.url))
            .timeout(Duration::from_millis(rng.gen_range(1..400)))
            .call();
        // Often right after the checkpoint: while its output goes out.
        let after = if rng.gen_bool(0.5) { 0..3 } else { 0..200 };
        std::thread::sleep(Duration::from_millis(rng.gen_range(after)));
        drop(s);
        kills += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let total = producer.join().unwrap();
    // A last server reads the rest; a graceful stop checkpoints and sends
    // the output held for it.
    let s = Server::start(&dir, None);
    wait_until("every event", || {
        s.query("k", "SELECT SUM(n) AS n FROM totals")
            .first()
            .is_some_and(|r| r["n"] == json!(total))
    });
    let expected: BTreeMap<String, i64> = (0..7)
        .map(|k| {
            let ids = (0..total).filter(|i| i % 7 == k);
            let row = json!({"k": k, "n": ids.clone().count(), "s": ids.sum::<i64>()});
            (row.to_string(), 1)
        })
        .collect();
    s.ok("POST", "/v0/pipelines/k/stop", None);
    wait_until("stopped", || {
        s.ok("GET", "/v0/pipelines/k", None)["deployment_status"] == "Stopped"
    });
    let mut got: BTreeMap<String, i64> = BTreeMap::new();
    for change in broker.read_all("totals_out") {
        let (row, w) = match (change.get("insert"), change.get("delete")) {
            (Some(r), _) => (r, 1),
            (_, Some(r)) => (r, -1),
            _ => panic!("not a change: {change}"),
        };
        *got.entry(row.to_string()).or_default() += w;
    }
    got.retain(|_, w| *w != 0);
    assert_eq!(got, expected, "after {kills} kills and {total} events");
    eprintln!(
        "{kills} kills, {total} events, {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// A Debezium change topic (as a PostgreSQL or MySQL connector writes it,
/// with and without the schema envelope) feeds a table with a primary key;
/// a view's changes go out as Debezium events.
#[test]
fn a_debezium_topic_feeds_a_table_and_a_view_leaves_as_debezium_events() {
    let broker = Broker::start();
    broker.create_topics(&["cdc_in", "cdc_out"]);
    let customer = |id: i64, city: &str| json!({"id": id, "name": format!("c{id}"), "city": city});
    let events = vec![
        // The snapshot, then live changes.
        json!({"before": null, "after": customer(1, "Oslo"), "op": "r", "source": {"table": "customers"}}),
        json!({"before": null, "after": customer(2, "Oslo"), "op": "r"}),
        json!({"schema": {"type": "struct"}, "payload": {"before": null, "after": customer(3, "Rome"), "op": "c", "ts_ms": 1}}),
        // An update with the old row (REPLICA IDENTITY FULL) and one
        // without it: the key replaces the row either way.
        json!({"before": customer(1, "Oslo"), "after": customer(1, "Rome"), "op": "u"}),
        json!({"before": null, "after": customer(2, "Lima"), "op": "u"}),
        json!({"before": customer(3, "Rome"), "after": null, "op": "d"}),
        // A tombstone after the delete, and an event that is not one.
        Value::Null,
        json!({"op": "x"}),
    ];
    broker.produce("cdc_in", &events);
    let input = json!([{
        "transport": {"name": "kafka_input", "config": {
            "bootstrap.servers": broker.servers, "topic": "cdc_in", "start_from": "earliest"}},
        "format": {"name": "json", "config": {"update_format": "debezium"}}
    }]);
    let output = json!([{
        "transport": {"name": "kafka_output", "config": {
            "bootstrap.servers": broker.servers, "topic": "cdc_out"}},
        "format": {"name": "json", "config": {"update_format": "debezium"}}
    }]);
    // Feldera's raw format beside it: each message one row, bytes and
    // line ends and all.
    broker.create_topics(&["raw_in"]);
    broker.produce_bytes(
        "raw_in",
        &[b"\x00\xff\n\x01", b"two\nlines\n", b"{\"op\": \"c\"}"],
    );
    let raw = json!([{
        "transport": {"name": "kafka_input", "config": {
            "bootstrap.servers": broker.servers, "topic": "raw_in", "start_from": "earliest"}},
        "format": {"name": "raw", "config": {"mode": "blob"}}
    }]);
    let sql = format!(
        "CREATE TABLE payloads (p VARBINARY) WITH ('connectors' = '{raw}');
         CREATE MATERIALIZED VIEW payload_sizes AS SELECT OCTET_LENGTH(p) AS n, TO_HEX(p) AS h FROM payloads;
         CREATE TABLE customers (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, city VARCHAR)
           WITH ('materialized' = 'true', 'connectors' = '{input}');
         CREATE MATERIALIZED VIEW rome WITH ('connectors' = '{output}') AS
           SELECT id, name FROM customers WHERE city = 'Rome';"
    );
    let dir = scratch("kafka-debezium");
    let s = Server::start(&dir, None);
    s.deploy("d", &sql);
    s.ok("POST", "/v0/pipelines/d/start", None);
    wait_until("the events to arrive", || {
        let stats = s.ok("GET", "/v0/pipelines/d/stats", None);
        let cdc = stats["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["config"]["stream"] == "customers")
            .unwrap()
            .clone();
        cdc["metrics"]["num_parse_errors"].as_u64() == Some(1)
            && s.query("d", "SELECT id, city FROM customers ORDER BY id")
                == vec![
                    json!({"id": 1, "city": "Rome"}),
                    json!({"id": 2, "city": "Lima"}),
                ]
    });
    wait_until("the raw messages", || {
        s.query("d", "SELECT n, h FROM payload_sizes ORDER BY n")
            == vec![
                json!({"n": 4, "h": "00ff0a01"}),
                json!({"n": 10, "h": "74776f0a6c696e65730a"}),
                json!({"n": 11, "h": "7b226f70223a202263227d"}),
            ]
    });
    // Out: 3 entered Rome and left it, 1 entered it. Whatever the steps,
    // the events add up to the view's contents.
    let out = broker.read("cdc_out", 1);
    let mut rome: BTreeMap<i64, i64> = BTreeMap::new();
    for e in &out {
        let (row, w) = match e["op"].as_str() {
            Some("c") => (&e["after"], 1),
            Some("d") => (&e["before"], -1),
            other => panic!("op {other:?} in {e}"),
        };
        *rome.entry(row["id"].as_i64().unwrap()).or_default() += w;
    }
    rome.retain(|_, w| *w != 0);
    assert_eq!(rome, BTreeMap::from([(1, 1)]), "{out:?}");
    s.ok("POST", "/v0/pipelines/d/stop?force=true", None);
}

/// A schema registry speaking the subset of Confluent's REST API that
/// Avro connectors use (`POST /subjects/{subject}/versions`, `GET
/// /schemas/ids/{id}`), on a free loopback port, for this test process.
struct Registry {
    url: String,
    schemas: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>,
}

impl Registry {
    fn start() -> Self {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let schemas: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>> = Default::default();
        let shared = schemas.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let mut length = 0;
                loop {
                    let mut h = String::new();
                    reader.read_line(&mut h).unwrap();
                    if h.trim().is_empty() {
                        break;
                    }
                    if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                let parts: Vec<&str> = line.split_whitespace().collect();
                let (status, answer) = {
                    let mut list = shared.lock().unwrap();
                    match (parts[0], parts[1].split('/').collect::<Vec<_>>().as_slice()) {
                        ("POST", ["", "subjects", subject, "versions"]) => {
                            let v: Value = serde_json::from_slice(&body).unwrap();
                            let schema = v["schema"].as_str().unwrap().to_string();
                            let id = match list.iter().position(|(_, s)| *s == schema) {
                                Some(i) => i + 1,
                                None => {
                                    list.push((subject.to_string(), schema));
                                    list.len()
                                }
                            };
                            ("200 OK", json!({"id": id}))
                        }
                        ("GET", ["", "schemas", "ids", id]) => {
                            match id
                                .parse::<usize>()
                                .ok()
                                .and_then(|i| list.get(i.wrapping_sub(1)))
                            {
                                Some((_, s)) => ("200 OK", json!({"schema": s})),
                                None => (
                                    "404 Not Found",
                                    json!({"error_code": 40403, "message": "Schema not found"}),
                                ),
                            }
                        }
                        _ => (
                            "404 Not Found",
                            json!({"error_code": 404, "message": "no such route"}),
                        ),
                    }
                };
                let text = answer.to_string();
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
            }
        });
        Self { url, schemas }
    }

    fn register(&self, subject: &str, schema: &str) -> u32 {
        let mut list = self.schemas.lock().unwrap();
        list.push((subject.to_string(), schema.to_string()));
        list.len() as u32
    }

    fn subjects(&self) -> Vec<String> {
        self.schemas
            .lock()
            .unwrap()
            .iter()
            .map(|(s, _)| s.clone())
            .collect()
    }

    fn schema(&self, id: u32) -> apache_avro::Schema {
        let list = self.schemas.lock().unwrap();
        apache_avro::Schema::parse_str(&list[id as usize - 1].1).unwrap()
    }
}

/// A datum in Confluent's wire format: a zero byte, the schema id, the datum.
fn confluent(id: u32, schema: &apache_avro::Schema, value: apache_avro::types::Value) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&id.to_be_bytes());
    out.extend(apache_avro::to_avro_datum(schema, value).unwrap());
    out
}

#[test]
fn avro_topics_with_a_schema_registry_feed_tables_and_a_view_leaves_as_avro() {
    use apache_avro::types::Value as A;
    let broker = Broker::start();
    broker.create_topics(&["avro_in", "avro_cdc", "avro_out"]);
    let registry = Registry::start();

    // Raw rows, written by apache-avro with logical types.
    let row_schema = r#"{"type": "record", "name": "order", "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": ["null", "string"]},
        {"name": "price", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}]},
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "extra", "type": "string", "default": ""}
    ]}"#;
    let id = registry.register("avro_in-value", row_schema);
    let schema = apache_avro::Schema::parse_str(row_schema).unwrap();
    let order = |id: i64, item: Option<&str>, cents: i64| {
        A::Record(vec![
            ("id".into(), A::Long(id)),
            (
                "item".into(),
                match item {
                    Some(s) => A::Union(1, Box::new(A::String(s.into()))),
                    None => A::Union(0, Box::new(A::Null)),
                },
            ),
            (
                "price".into(),
                A::Union(
                    1,
                    Box::new(A::Decimal(apache_avro::Decimal::from(cents.to_be_bytes()))),
                ),
            ),
            ("day".into(), A::Union(1, Box::new(A::Date(19724)))),
            (
                "at".into(),
                A::Union(1, Box::new(A::TimestampMicros(1_704_164_645_000_006))),
            ),
            ("extra".into(), A::String("ignored".into())),
        ])
    };
    let producer: BaseProducer = broker.config().create().unwrap();
    let send = |topic: &str, payload: &[u8]| {
        producer
            .send(BaseRecord::<(), [u8]>::to(topic).payload(payload))
            .expect("queued");
    };
    send(
        "avro_in",
        &confluent(id, &schema, order(1, Some("tea"), 1250)),
    );
    send("avro_in", &confluent(id, &schema, order(2, None, -5)));
    // Not Confluent's framing: rejected with its reason, the rest goes on.
    send("avro_in", b"{\"id\": 3}");
    send(
        "avro_in",
        &confluent(id, &schema, order(4, Some("jam"), 300)),
    );

    // Debezium change events with a Row schema inside the envelope.
    let cdc_schema = r#"{"type": "record", "name": "Envelope", "fields": [
        {"name": "before", "type": ["null", {"type": "record", "name": "Row", "fields": [
            {"name": "id", "type": "long"}, {"name": "city", "type": ["null", "string"]}]}]},
        {"name": "after", "type": ["null", "Row"]},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"]}
    ]}"#;
    let cdc_id = registry.register("avro_cdc-value", cdc_schema);
    let cdc = apache_avro::Schema::parse_str(cdc_schema).unwrap();
    let row = |id: i64, city: &str| {
        A::Union(
            1,
            Box::new(A::Record(vec![
                ("id".into(), A::Long(id)),
                ("city".into(), A::Union(1, Box::new(A::String(city.into())))),
            ])),
        )
    };
    let none = || A::Union(0, Box::new(A::Null));
    let event = |before: A, after: A, op: &str| {
        A::Record(vec![
            ("before".into(), before),
            ("after".into(), after),
            ("op".into(), A::String(op.into())),
            ("ts_ms".into(), none()),
        ])
    };
    for e in [
        event(none(), row(1, "Oslo"), "c"),
        event(none(), row(2, "Rome"), "r"),
        event(row(1, "Oslo"), row(1, "Lima"), "u"),
        event(row(2, "Rome"), none(), "d"),
    ] {
        send("avro_cdc", &confluent(cdc_id, &cdc, e));
    }
    // A tombstone follows a delete.
    send("avro_cdc", b"");
    producer.flush(Duration::from_secs(30)).expect("delivered");

    let registry_config = json!({"registry_urls": [registry.url]});
    let input = |topic: &str, update: &str| {
        let mut config = registry_config.clone();
        config["update_format"] = update.into();
        json!([{
            "transport": {"name": "kafka_input", "config": {
                "bootstrap.servers": broker.servers, "topic": topic, "start_from": "earliest"}},
            "format": {"name": "avro", "config": config}
        }])
    };
    let output = json!([{
        "transport": {"name": "kafka_output", "config": {
            "bootstrap.servers": broker.servers, "topic": "avro_out"}},
        "format": {"name": "avro", "config": registry_config}
    }]);
    let sql = format!(
        "CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, item VARCHAR, price DECIMAL(10, 2),
                              day DATE, at TIMESTAMP)
           WITH ('materialized' = 'true', 'connectors' = '{}');
         CREATE TABLE customers (id BIGINT NOT NULL PRIMARY KEY, city VARCHAR)
           WITH ('materialized' = 'true', 'connectors' = '{}');
         CREATE MATERIALIZED VIEW cheap WITH ('connectors' = '{output}') AS
           SELECT id, item, price, day FROM orders WHERE price < 10;",
        input("avro_in", "raw"),
        input("avro_cdc", "debezium")
    );
    let dir = scratch("kafka-avro");
    let s = Server::start(&dir, None);
    s.deploy("a", &sql);
    s.ok("POST", "/v0/pipelines/a/start", None);
    wait_until("the Avro messages to arrive", || {
        s.query("a", "SELECT COUNT(*) AS n FROM orders") == vec![json!({"n": 3})]
            && s.query("a", "SELECT id, city FROM customers ORDER BY id")
                == vec![json!({"id": 1, "city": "Lima"})]
    });
    assert_eq!(
        s.query(
            "a",
            "SELECT id, item, CAST(price AS VARCHAR) AS price, CAST(day AS VARCHAR) AS day,
                    CAST(at AS VARCHAR) AS at FROM orders ORDER BY id"
        ),
        vec![
            json!({"id": 1, "item": "tea", "price": "12.50", "day": "2024-01-02", "at": "2024-01-02T03:04:05.000006"}),
            json!({"id": 2, "item": null, "price": "-0.05", "day": "2024-01-02", "at": "2024-01-02T03:04:05.000006"}),
            json!({"id": 4, "item": "jam", "price": "3.00", "day": "2024-01-02", "at": "2024-01-02T03:04:05.000006"}),
        ]
    );
    let stats = s.ok("GET", "/v0/pipelines/a/stats", None);
    let orders_in = stats["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["config"]["stream"] == "orders")
        .unwrap();
    assert_eq!(orders_in["metrics"]["num_parse_errors"], 1, "{stats}");
    assert!(
        orders_in["last_error"]
            .as_str()
            .unwrap()
            .contains("Confluent's wire format"),
        "{orders_in}"
    );

    // Out: the view's rows as Avro, in a schema the server registered,
    // each with its `op` header.
    let consumer: BaseConsumer = broker
        .config()
        .set("group.id", "avro-reader")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&["avro_out"]).unwrap();
    let mut rows = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while rows.values().sum::<i64>() < 2 {
        assert!(Instant::now() < deadline, "view rows on avro_out: {rows:?}");
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        use rdkafka::message::Headers;
        let op = m
            .headers()
            .and_then(|h| h.iter().find(|h| h.key == "op"))
            .and_then(|h| h.value)
            .map(|v| String::from_utf8_lossy(v).into_owned());
        let payload = m.payload().unwrap();
        assert_eq!(payload[0], 0, "Confluent's magic byte");
        let id = u32::from_be_bytes(payload[1..5].try_into().unwrap());
        let schema = registry.schema(id);
        let value = apache_avro::from_avro_datum(&schema, &mut &payload[5..], None).unwrap();
        let w = match op.as_deref() {
            Some("insert") => 1,
            Some("delete") => -1,
            other => panic!("op header {other:?}"),
        };
        *rows.entry(format!("{value:?}")).or_insert(0) += w;
    }
    rows.retain(|_, w| *w != 0);
    let rows: Vec<&String> = rows.keys().collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows[0].contains("Long(2)") && rows[0].contains("Union(0, Null)"),
        "{rows:?}"
    );
    assert!(
        rows[1].contains("Long(4)") && rows[1].contains("String(\"jam\")"),
        "{rows:?}"
    );
    assert!(rows[1].contains("Date(19724)"), "{rows:?}");
    assert!(registry.subjects().contains(&"avro_out-value".to_string()));
    s.ok("POST", "/v0/pipelines/a/stop?force=true", None);
}

/// The samples of `series` in a Prometheus text: (labels, value).
fn samples(text: &str, series: &str) -> Vec<(String, f64)> {
    let prefix = format!("{series}{{");
    text.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|rest| {
            let (labels, value) = rest.rsplit_once("} ").expect("a sample");
            (labels.to_string(), value.parse().expect("a number"))
        })
        .collect()
}

/// The server-wide scrape (`GET /v0/metrics`): each pipeline's status
/// (stopped ones too), a Kafka input's lag per partition, which grows
/// while the pipeline is paused and messages arrive and returns to 0 when
/// it resumes, and its checkpoints. Every series the Grafana dashboard in
/// `docker/` charts is among them.
#[test]
fn the_server_wide_metrics_show_status_lag_and_checkpoints_for_the_dashboard() {
    let broker = Broker::start();
    broker.create_topics(&["lagging", "lagging_out"]);
    let produce = |ids| broker.produce_orders_one_by_one("lagging", ids);
    produce(1..=6);
    let input = json!([{
        "transport": {"name": "kafka_input", "config": {
            "bootstrap.servers": broker.servers, "topic": "lagging", "start_from": "earliest"}},
        "format": {"name": "json", "config": {"update_format": "insert_delete"}}
    }]);
    let output = json!([{
        "transport": {"name": "kafka_output", "config": {
            "bootstrap.servers": broker.servers, "topic": "lagging_out"}},
        "format": {"name": "json"}
    }]);
    let dir = scratch("kafka-metrics");
    let s = Server::start(&dir, None);
    // Append-only, and a lateness none of the rows exceeds: the series of
    // refused deletions and late rows are there too (each at 0).
    s.deploy(
        "k",
        &format!(
            "CREATE TABLE orders (id BIGINT LATENESS 1000, item VARCHAR, qty INT) WITH ('materialized' = 'true', 'append_only' = 'true', 'connectors' = '{input}');
             CREATE VIEW big WITH ('connectors' = '{output}') AS SELECT id FROM orders WHERE qty >= 20;"
        ),
    );
    s.deploy("idle", "CREATE TABLE t (x INT);");
    s.ok("POST", "/v0/pipelines/k/start", None);
    let count = |s: &Server| s.query("k", "SELECT COUNT(*) AS c FROM orders")[0]["c"].clone();
    wait_until("the first messages", || count(&s) == 6);
    s.ok("POST", "/v0/pipelines/k/checkpoint", None);
    let metrics = || s.send("GET", "/v0/metrics", None).1;
    let partition = "pipeline=\"k\",endpoint=\"orders.kafka_input-0\",relation=\"orders\",topic=\"lagging\",partition=\"0\"";
    let lag = |m: &str, series: &str| -> Option<f64> {
        samples(m, series)
            .into_iter()
            .find(|(l, _)| l == partition)
            .map(|(_, v)| v)
    };
    wait_until("no lag once every message is read", || {
        let m = metrics();
        lag(&m, "eddy_kafka_consumer_lag_records") == Some(0.0)
            && lag(&m, "eddy_kafka_consumer_lag_seconds") == Some(0.0)
    });

    // Paused, the input reads nothing: what arrives waits, and the lag
    // says how much.
    s.ok("POST", "/v0/pipelines/k/pause", None);
    produce(7..=10);
    wait_until("the lag of the messages written while paused", || {
        lag(&metrics(), "eddy_kafka_consumer_lag_records") == Some(4.0)
    });
    let m = metrics();
    assert!(
        lag(&m, "eddy_kafka_consumer_lag_seconds").is_some_and(|s| s > 0.0),
        "{m}"
    );
    let status = |m: &str, pipeline: &str| -> Vec<String> {
        samples(m, "eddy_pipeline_status")
            .into_iter()
            .filter(|(l, v)| l.starts_with(&format!("pipeline=\"{pipeline}\",")) && *v == 1.0)
            .map(|(l, _)| l)
            .collect()
    };
    assert_eq!(status(&m, "k"), ["pipeline=\"k\",status=\"Paused\""], "{m}");
    assert_eq!(
        status(&m, "idle"),
        ["pipeline=\"idle\",status=\"Stopped\""],
        "{m}"
    );
    // Each status of each pipeline is a sample (1 for the one it is in).
    assert_eq!(samples(&m, "eddy_pipeline_status").len(), 2 * 7, "{m}");
    assert_eq!(
        samples(&m, "eddy_checkpoints_total"),
        [("pipeline=\"k\"".to_string(), 1.0)]
    );
    assert_eq!(
        samples(&m, "eddy_last_checkpoint_duration_seconds").len(),
        1,
        "{m}"
    );
    assert_eq!(samples(&m, "eddy_uptime_seconds").len(), 1, "{m}");
    // One family per series, whatever adds to it.
    assert_eq!(
        m.lines()
            .filter(|l| *l == "# TYPE eddy_rss_bytes gauge")
            .count(),
        1,
        "{m}"
    );

    s.ok("POST", "/v0/pipelines/k/start", None);
    wait_until("the messages written while paused", || count(&s) == 10);
    wait_until("no lag once they are read", || {
        lag(&metrics(), "eddy_kafka_consumer_lag_records") == Some(0.0)
    });

    // Every series a panel of the dashboard queries has samples.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docker/grafana/eddy-dashboard.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let m = metrics();
    let mut queried = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let mut rest = expr;
            while let Some(at) = rest.find("eddy_") {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[at + name.len()..];
                queried += 1;
                assert!(
                    !samples(&m, &name).is_empty(),
                    "panel '{}' queries {name}, which /v0/metrics does not have:\n{m}",
                    panel["title"]
                );
            }
        }
    }
    assert!(queried >= 25, "{queried}");
    s.ok("POST", "/v0/pipelines/k/stop?force=true", None);
}
