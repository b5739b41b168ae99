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
        let admin: AdminClient<DefaultClientContext> = self.config().create().unwrap();
        let topics: Vec<NewTopic> = names
            .iter()
            .map(|n| NewTopic::new(n, 1, TopicReplication::Fixed(1)))
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
