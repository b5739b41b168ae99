//! moto's S3 server (PyPI, installed by `scripts/test-tools.sh` under
//! ~/.cache/eddy), started on a free loopback port and killed with the
//! test, driven over S3's REST API as any client would (moto does not
//! check signatures).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{free_port, tool};

/// A moto S3 server; killed when dropped.
pub struct Moto {
    child: Child,
    /// Its endpoint, `http://127.0.0.1:port`.
    pub url: String,
}

/// The access key the connectors use, named in each request of the test
/// (moto checks no signature, but keeps objects private to their owner).
const AUTHORIZATION: &str = "AWS4-HMAC-SHA256 Credential=eddy/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0";

fn request(method: &str, url: &str) -> ureq::Request {
    ureq::request(method, url).set("Authorization", AUTHORIZATION)
}

impl Moto {
    pub fn start() -> Self {
        let port = free_port();
        let child = Command::new(tool("EDDY_MOTO", "moto-venv/bin/moto_server"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server starts");
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while ureq::get(&format!("{url}/")).call().is_err() {
            assert!(started.elapsed() < Duration::from_secs(60), "moto answers");
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { child, url }
    }

    pub fn create_bucket(&self, bucket: &str) {
        request("PUT", &format!("{}/{bucket}", self.url))
            .call()
            .expect("bucket created");
    }

    pub fn put(&self, bucket: &str, key: &str, body: &[u8]) {
        request("PUT", &format!("{}/{bucket}/{key}", self.url))
            .send_bytes(body)
            .expect("object put");
    }

    pub fn get(&self, bucket: &str, key: &str) -> Vec<u8> {
        let mut out = Vec::new();
        std::io::Read::read_to_end(
            &mut request("GET", &format!("{}/{bucket}/{key}", self.url))
                .call()
                .expect("object read")
                .into_reader(),
            &mut out,
        )
        .unwrap();
        out
    }

    /// The keys under `prefix`, in order.
    pub fn list(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let xml = request("GET", &format!("{}/{bucket}", self.url))
            .query("list-type", "2")
            .query("prefix", prefix)
            .call()
            .expect("listing")
            .into_string()
            .unwrap();
        xml.split("<Key>")
            .skip(1)
            .map(|s| s.split("</Key>").next().unwrap().to_string())
            .collect()
    }

    /// A connector's bucket settings.
    pub fn bucket(&self, bucket: &str) -> Value {
        json!({
            "bucket_name": bucket, "region": "us-east-1", "endpoint_url": self.url,
            "aws_access_key_id": "eddy", "aws_secret_access_key": "eddy-secret",
        })
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
