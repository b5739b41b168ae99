#!/usr/bin/env python3
"""Throughput of Eddy's object storage, PostgreSQL and Redis connectors,
each beside what the system's own tools do with the same rows, in one run.

Starts moto's S3 server, PostgreSQL and Redis (as the tests do; installed by
scripts/test-tools.sh) and `eddy serve`, then for each connector moves
`--rows` rows and reports rows per second:

* s3_input: objects of JSON lines read into a table (until the table holds
  every row) -- beside a plain HTTP GET of the same objects;
* s3_output: a view's changes written as objects (until the output reports
  every row sent) -- beside a plain HTTP PUT of the same bytes;
* postgres_output: a keyed view kept in a table (until the table holds every
  row) -- beside psql's COPY of the same rows;
* postgres_cdc_input, snapshot: a table's rows read into a table (until a
  count over it is complete) -- beside psql's COPY of the rows out;
* postgres_cdc_input, stream: as many rows inserted by one COPY, read from
  the replication slot (until the count is complete) -- beside PostgreSQL
  decoding the same transaction on a slot of its own
  (`pg_logical_slot_get_binary_changes`);
* redis_output: a keyed view kept in Redis (until Redis holds every key) --
  beside `redis-cli --pipe` of the same SETs;
* delta_table_output: a view's rows appended to a local Delta table (until
  the output reports every row sent) -- beside delta-rs's Python package
  writing the same rows (`write_deltalake`);
* delta_table_input: a local Delta table's snapshot read into a table
  (until a count over it is complete) -- beside delta-rs's Python package
  reading it (`DeltaTable(...).to_pyarrow_dataset().to_table()`).
* iceberg_input: a local Iceberg table's snapshot (written by PyIceberg,
  10,000 rows a data file) read into a table (until a count over it is
  complete) -- beside PyIceberg reading it (`table.scan().to_arrow()`).

The Iceberg bench uses the PyIceberg that scripts/test-tools.sh installs.
The Delta baselines need `deltalake` and `pyarrow` from PyPI: the bench
installs them into ~/.cache/eddy/delta-bench-venv when missing (they are
not test tools). `--only NAME` runs one system's benches (s3, postgres,
redis, delta, iceberg, iceberg-follow).

Usage: benches/connectors.py --eddy target/release/eddy [--rows 200000]
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CACHE = Path(os.environ.get("EDDY_CACHE", Path.home() / ".cache/eddy"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, headers=None):
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    with urllib.request.urlopen(req, timeout=600) as r:
        return r.read()


def wait(what, check, timeout=900):
    started = time.time()
    while not check():
        if time.time() - started > timeout:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.05)


class Eddy:
    def __init__(self, binary, data):
        self.proc = subprocess.Popen(
            [binary, "serve", "--bind", "127.0.0.1:0", "--data-dir", data],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "EDDY_LOG": "warn"},
        )
        line = self.proc.stdout.readline()
        self.url = line.strip().removeprefix("eddy listening on ")
        self.data = data

    def api(self, method, path, body=None):
        out = http(method, self.url + path, json.dumps(body) if body is not None else None,
                   {"Content-Type": "application/json"})
        return json.loads(out) if out else None

    def deploy(self, name, sql):
        d = self.api("PUT", f"/v0/pipelines/{name}", {"program_code": sql})
        assert d["program_status"] == "Success", d
        self.api("POST", f"/v0/pipelines/{name}/start")
        wait("running", lambda: self.api("GET", f"/v0/pipelines/{name}")["deployment_status"] == "Running")

    def ingest(self, name, table, lines):
        http("POST", f"{self.url}/v0/pipelines/{name}/ingress/{table}?format=json", "\n".join(lines))

    def count(self, name, sql):
        out = http("GET", f"{self.url}/v0/pipelines/{name}/query?format=json&sql=" + urllib.request.quote(sql))
        rows = [json.loads(l) for l in out.decode().splitlines() if l]
        return rows[0]["n"] if rows else 0

    def output_records(self, name):
        stats = self.api("GET", f"/v0/pipelines/{name}/stats")
        return sum(o["metrics"]["transmitted_records"] for o in stats["outputs"])

    def stop(self, name):
        self.api("POST", f"/v0/pipelines/{name}/stop?force=true")

    def close(self):
        self.proc.kill()


def row(i):
    return {"id": i, "name": f"name-{i}", "amount": i % 1000}


def inserts(rows):
    return [json.dumps({"insert": r}) for r in rows]


def report(name, n, eddy_s, tool, tool_s):
    print(f"| {name} | {n:,} | {n / eddy_s:,.0f} | {tool} | {n / tool_s:,.0f} | {tool_s / eddy_s:.2f} |", flush=True)


# moto checks no signature but keeps objects private to the access key that
# wrote them: name the connectors' key in the bench's own requests.
S3_AUTH = {"Authorization": "AWS4-HMAC-SHA256 Credential=b/20260101/us-east-1/s3/aws4_request, "
                            "SignedHeaders=host, Signature=0",
           "Content-Type": "application/octet-stream"}


def start_moto():
    """moto's server on a free port, answering; its process and URL."""
    port = free_port()
    moto = subprocess.Popen([str(CACHE / "moto-venv/bin/moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait("moto", lambda: _ok(url + "/"))
    return moto, url


def bench_s3(eddy, n, tmp):
    moto, url = start_moto()
    try:
        http("PUT", f"{url}/bench", headers=S3_AUTH)
        per_object = 10_000
        objects = []
        for start in range(0, n, per_object):
            body = "\n".join(inserts(row(i) for i in range(start, min(n, start + per_object)))) + "\n"
            key = f"in/{start // per_object:06}.json"
            http("PUT", f"{url}/bench/{key}", body, S3_AUTH)
            objects.append(key)
        bucket = {"bucket_name": "bench", "region": "us-east-1", "endpoint_url": url,
                  "aws_access_key_id": "b", "aws_secret_access_key": "b"}
        started = time.time()
        for key in objects:
            http("GET", f"{url}/bench/{key}", headers=S3_AUTH)
        get_s = time.time() - started
        connectors = json.dumps([{"transport": {"name": "s3_input", "config": {**bucket, "prefix": "in/"}},
                                  "format": {"name": "json"}}])
        started = time.time()
        eddy.deploy("s3in", f"CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR, amount BIGINT) "
                            f"WITH ('connectors' = '{connectors}');"
                            "CREATE MATERIALIZED VIEW c AS SELECT COUNT(*) AS n FROM t;")
        wait("s3_input", lambda: eddy.count("s3in", "SELECT n FROM c") == n)
        report("s3_input (json)", n, time.time() - started, "HTTP GET of the objects", get_s)
        eddy.stop("s3in")

        out = json.dumps([{"transport": {"name": "s3_output", "config": {**bucket, "prefix": "out/"}},
                           "format": {"name": "json"}}])
        eddy.deploy("s3out", "CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR, amount BIGINT);"
                             f"CREATE VIEW v WITH ('connectors' = '{out}') AS SELECT * FROM t;")
        lines = inserts(row(i) for i in range(n))
        started = time.time()
        for start in range(0, n, per_object):
            eddy.ingest("s3out", "t", lines[start:start + per_object])
        wait("s3_output", lambda: eddy.output_records("s3out") >= n)
        eddy_s = time.time() - started
        started = time.time()
        for start in range(0, n, per_object):
            http("PUT", f"{url}/bench/direct/{start:09}.json", "\n".join(lines[start:start + per_object]), S3_AUTH)
        report("s3_output (json)", n, eddy_s, "HTTP PUT of the same bytes", time.time() - started)
        eddy.stop("s3out")
    finally:
        moto.kill()


def _ok(url):
    try:
        http("GET", url)
        return True
    except Exception:
        return False


def bench_postgres(eddy, n, tmp):
    bins = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1]
    data = Path(tmp) / "pg"
    data.mkdir()
    as_pg = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
    if as_pg:
        shutil.chown(tmp, "postgres")
        shutil.chown(data, "postgres")
    subprocess.run(as_pg + [str(bins / "initdb"), "-U", "eddy", "--auth=trust", "--no-sync", "-D", str(data / "d")],
                   check=True, stdout=subprocess.DEVNULL)
    port = free_port()
    pg = subprocess.Popen(as_pg + [str(bins / "postgres"), "-D", str(data / "d"), "-p", str(port), "-k", str(data),
                                   "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "wal_level=logical"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def psql(sql, stdin=None):
        return subprocess.run([str(bins / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "eddy", "-d", "postgres",
                               "-At", "-c", sql], input=stdin, capture_output=True, text=True).stdout.strip()

    try:
        wait("postgres", lambda: psql("SELECT 1") == "1")
        psql("CREATE TABLE out (id BIGINT PRIMARY KEY, name TEXT, amount BIGINT)")
        psql("CREATE TABLE direct (id BIGINT PRIMARY KEY, name TEXT, amount BIGINT)")
        csv = "".join(f"{i},name-{i},{i % 1000}\n" for i in range(n))
        started = time.time()
        psql("COPY direct FROM STDIN WITH (FORMAT csv)", csv)
        copy_s = time.time() - started
        assert psql("SELECT count(*) FROM direct") == str(n)
        out = json.dumps([{"index": "v_id", "transport": {"name": "postgres_output", "config": {
            "uri": f"postgres://eddy@127.0.0.1:{port}/postgres", "table": "out"}}}])
        eddy.deploy("pgout", "CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR, amount BIGINT);"
                             f"CREATE VIEW v WITH ('connectors' = '{out}') AS SELECT * FROM t;"
                             "CREATE INDEX v_id ON v(id);")
        lines = inserts(row(i) for i in range(n))
        started = time.time()
        for start in range(0, n, 10_000):
            eddy.ingest("pgout", "t", lines[start:start + 10_000])
        wait("postgres_output", lambda: psql("SELECT count(*) FROM out") == str(n))
        report("postgres_output (upserts)", n, time.time() - started, "psql COPY of the same rows", copy_s)
        eddy.stop("pgout")

        psql("CREATE TABLE src (id BIGINT PRIMARY KEY, name TEXT, amount BIGINT)")
        psql("ALTER TABLE src REPLICA IDENTITY FULL")
        psql("CREATE PUBLICATION bench FOR TABLE src")
        psql("COPY src FROM STDIN WITH (FORMAT csv)", csv)
        started = time.time()
        out = psql("COPY src TO STDOUT WITH (FORMAT csv)")
        copy_out_s = time.time() - started
        assert out.count("\n") == n - 1
        cdc = json.dumps([{"transport": {"name": "postgres_cdc_input", "config": {
            "uri": f"postgres://eddy@127.0.0.1:{port}/postgres", "publication": "bench",
            "source_table": "src"}}}])
        started = time.time()
        eddy.deploy("pgcdc", f"CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR, amount BIGINT) "
                             f"WITH ('connectors' = '{cdc}');"
                             "CREATE MATERIALIZED VIEW c AS SELECT COUNT(*) AS n FROM t;")
        wait("postgres_cdc_input (snapshot)", lambda: eddy.count("pgcdc", "SELECT n FROM c") == n)
        report("postgres_cdc_input (snapshot)", n, time.time() - started, "psql COPY of the rows out", copy_out_s)
        psql("SELECT pg_create_logical_replication_slot('direct', 'pgoutput')")
        more = "".join(f"{i},name-{i},{i % 1000}\n" for i in range(n, 2 * n))
        started = time.time()
        psql("COPY src FROM STDIN WITH (FORMAT csv)", more)
        wait("postgres_cdc_input (stream)", lambda: eddy.count("pgcdc", "SELECT n FROM c") == 2 * n)
        eddy_s = time.time() - started
        started = time.time()
        decoded = psql("SELECT count(*) FROM pg_logical_slot_get_binary_changes('direct', NULL, NULL, "
                       "'proto_version', '1', 'publication_names', 'bench')")
        decode_s = time.time() - started
        assert int(decoded) >= n, decoded
        report("postgres_cdc_input (stream)", n, eddy_s, "pgoutput decoding on a slot of its own", decode_s)
        eddy.stop("pgcdc")
    finally:
        # runuser passes no signal on: stop the server by its data folder.
        subprocess.run(as_pg + [str(bins / "pg_ctl"), "-m", "immediate", "-w", "stop", "-D", str(data / "d")],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pg.wait()


def bench_redis(eddy, n, tmp):
    port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def cli(*args, stdin=None):
        return subprocess.run(["redis-cli", "-p", str(port), *args], input=stdin, capture_output=True,
                              text=True).stdout.strip()

    try:
        wait("redis", lambda: cli("PING") == "PONG")
        commands = "".join(f"SET d:{i} {json.dumps(json.dumps(row(i)))}\n" for i in range(n))
        started = time.time()
        cli("--pipe", stdin=commands)
        pipe_s = time.time() - started
        cli("FLUSHALL")
        out = json.dumps([{"transport": {"name": "redis_output", "config": {
            "connection_string": f"redis://127.0.0.1:{port}/0"}},
            "format": {"name": "json", "config": {"key_fields": ["id"]}}}])
        eddy.deploy("redisout", "CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR, amount BIGINT);"
                                f"CREATE VIEW v WITH ('connectors' = '{out}') AS SELECT * FROM t;")
        lines = inserts(row(i) for i in range(n))
        started = time.time()
        for start in range(0, n, 10_000):
            eddy.ingest("redisout", "t", lines[start:start + 10_000])
        wait("redis_output", lambda: cli("DBSIZE") == str(n))
        report("redis_output (SETs)", n, time.time() - started, "redis-cli --pipe of the same SETs", pipe_s)
        eddy.stop("redisout")
    finally:
        redis.kill()


DELTA_VENV = CACHE / "delta-bench-venv"


def delta_python():
    python = DELTA_VENV / "bin/python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(DELTA_VENV)], check=True)
    if subprocess.run([str(python), "-c", "import deltalake, pyarrow"], capture_output=True).returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", "deltalake", "pyarrow"], check=True)
    return str(python)


DELTA_WRITE = '''
import sys, time, pyarrow as pa, deltalake
n, path = int(sys.argv[1]), sys.argv[2]
t = pa.table({"id": pa.array(range(n), pa.int64()), "name": [f"name-{i}" for i in range(n)],
              "amount": pa.array([i % 1000 for i in range(n)], pa.int64())})
started = time.time()
for start in range(0, n, 10_000):
    deltalake.write_deltalake(path, t.slice(start, 10_000), mode="append")
print(time.time() - started)
'''

DELTA_READ = '''
import sys, time, deltalake
started = time.time()
rows = deltalake.DeltaTable(sys.argv[1]).to_pyarrow_dataset().to_table().num_rows
print(time.time() - started, rows)
'''


def bench_delta(eddy, n, tmp):
    python = delta_python()
    files = Path(eddy.data) / "files"
    direct = str(Path(tmp) / "direct")
    write_s = float(subprocess.run([python, "-c", DELTA_WRITE, str(n), direct], check=True,
                                   capture_output=True, text=True).stdout)
    out = json.dumps([{"transport": {"name": "delta_table_output", "config": {
        "uri": "bench/out", "mode": "truncate"}}}])
    eddy.deploy("deltaout", "CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR, amount BIGINT);"
                            f"CREATE VIEW v WITH ('connectors' = '{out}') AS SELECT * FROM t;")
    lines = inserts(row(i) for i in range(n))
    started = time.time()
    for start in range(0, n, 10_000):
        eddy.ingest("deltaout", "t", lines[start:start + 10_000])
    wait("delta_table_output", lambda: eddy.output_records("deltaout") >= n)
    report("delta_table_output (append)", n, time.time() - started,
           "delta-rs (Python) appending the same rows, 10,000 a commit", write_s)
    eddy.stop("deltaout")

    read_s, rows = subprocess.run([python, "-c", DELTA_READ, direct], check=True, capture_output=True,
                                  text=True).stdout.split()
    assert int(rows) == n, rows
    shutil.copytree(direct, files / "bench" / "in")
    src = json.dumps([{"transport": {"name": "delta_table_input", "config": {
        "uri": "bench/in", "mode": "snapshot"}}}])
    started = time.time()
    eddy.deploy("deltain", f"CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR, amount BIGINT) "
                           f"WITH ('connectors' = '{src}');"
                           "CREATE MATERIALIZED VIEW c AS SELECT COUNT(*) AS n FROM t;")
    wait("delta_table_input", lambda: eddy.count("deltain", "SELECT n FROM c") == n)
    report("delta_table_input (snapshot)", n, time.time() - started,
           "delta-rs (Python) reading the table into Arrow", float(read_s))
    eddy.stop("deltain")


ICEBERG = """
import sys, time, pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
n, folder = int(sys.argv[1]), sys.argv[2]
catalog = SqlCatalog("bench", uri=f"sqlite:///{folder}/catalog.db", warehouse=f"file://{folder}/wh")
catalog.create_namespace("ns")
t = pa.table({"id": pa.array(range(n), pa.int64()), "name": [f"name-{i}" for i in range(n)],
              "amount": pa.array([i % 1000 for i in range(n)], pa.int64())})
table = catalog.create_table("ns.t", schema=t.schema)
for start in range(0, n, 10_000):
    table.append(t.slice(start, 10_000))
table = catalog.load_table("ns.t")
started = time.time()
rows = table.scan().to_arrow().num_rows
print(time.time() - started, rows, table.metadata_location)
"""


def bench_iceberg(eddy, n, tmp):
    python = str(CACHE / "iceberg-venv/bin/python")
    folder = Path(eddy.data) / "files" / "iceberg"
    folder.mkdir(parents=True)
    read_s, rows, location = subprocess.run([python, "-c", ICEBERG, str(n), str(folder)], check=True,
                                            capture_output=True, text=True).stdout.split()
    assert int(rows) == n, rows
    src = json.dumps([{"transport": {"name": "iceberg_input", "config": {
        "metadata_location": location, "mode": "snapshot"}}}])
    started = time.time()
    eddy.deploy("icebergin", f"CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR, amount BIGINT) "
                             f"WITH ('connectors' = '{src}');"
                             "CREATE MATERIALIZED VIEW c AS SELECT COUNT(*) AS n FROM t;")
    wait("iceberg_input", lambda: eddy.count("icebergin", "SELECT n FROM c") == n)
    report("iceberg_input (snapshot)", n, time.time() - started,
           "PyIceberg reading the table into Arrow", float(read_s))
    eddy.stop("icebergin")


ICEBERG_GLUE = """
import json, sys, time, boto3, pyarrow as pa
from pyiceberg.catalog.glue import GlueCatalog
n, url, per = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
keys = {"access-key-id": "b", "secret-access-key": "b", "region": "us-east-1"}
props = {"warehouse": "s3://lake/wh", "glue.endpoint": url, "s3.endpoint": url}
props.update({f"{s}.{k}": v for s in ("glue", "s3") for k, v in keys.items()})
boto3.client("s3", endpoint_url=url, aws_access_key_id="b", aws_secret_access_key="b",
             region_name="us-east-1").create_bucket(Bucket="lake")
catalog = GlueCatalog("bench", **props)
catalog.create_namespace("ns")
t = pa.table({"id": pa.array(range(n), pa.int64()), "name": [f"name-{i}" for i in range(n)],
              "amount": pa.array([i % 1000 for i in range(n)], pa.int64())})
table = catalog.create_table("ns.t", schema=t.schema)
ids = []
for start in range(0, n, per):
    table.append(t.slice(start, per))
    table = catalog.load_table("ns.t")
    ids.append(table.current_snapshot().snapshot_id)
started = time.time()
rows = catalog.load_table("ns.t").scan().to_arrow().num_rows
print(json.dumps({"read_s": time.time() - started, "rows": rows, "first": ids[0], "last": ids[-1]}))
"""


def bench_iceberg_follow(eddy, n, tmp):
    """A table in moto's S3 and Glue, appended in commits of 10,000 rows:
    Eddy reads the first snapshot, then follows the others, one after
    another, up to the last (end_snapshot_id)."""
    moto, url = start_moto()
    try:
        out = subprocess.run([str(CACHE / "iceberg-venv/bin/python"), "-c", ICEBERG_GLUE, str(n), url, "10000"],
                             check=True, capture_output=True, text=True).stdout
        table = json.loads(out)
        assert table["rows"] == n, table
        keys = {"access-key-id": "b", "secret-access-key": "b", "region": "us-east-1"}
        config = {"mode": "snapshot_and_follow", "catalog_type": "glue", "table_name": "ns.t",
                  "snapshot_id": table["first"], "end_snapshot_id": table["last"],
                  "glue.endpoint": url, "s3.endpoint": url}
        config.update({f"{s}.{k}": v for s in ("glue", "s3") for k, v in keys.items()})
        src = json.dumps([{"transport": {"name": "iceberg_input", "config": config}}])
        started = time.time()
        eddy.deploy("icebergfollow", f"CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR, amount BIGINT) "
                                     f"WITH ('connectors' = '{src}');"
                                     "CREATE MATERIALIZED VIEW c AS SELECT COUNT(*) AS n FROM t;")
        wait("iceberg_input follow", lambda: eddy.count("icebergfollow", "SELECT n FROM c") == n)
        report(f"iceberg_input (Glue; 1 snapshot, then {n // 10_000 - 1} followed)", n,
               time.time() - started, "PyIceberg reading the table through Glue into Arrow", table["read_s"])
        eddy.stop("icebergfollow")
    finally:
        moto.kill()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--eddy", required=True)
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--only", choices=["s3", "postgres", "redis", "delta", "iceberg", "iceberg-follow"])
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="eddy-connector-bench-")
    eddy = Eddy(args.eddy, os.path.join(tmp, "eddy"))
    try:
        print("| connector | rows | Eddy rows/s | the system's own tool | its rows/s | Eddy / tool |")
        print("|---|---:|---:|---|---:|---:|")
        benches = {"s3": bench_s3, "postgres": bench_postgres, "redis": bench_redis, "delta": bench_delta,
                   "iceberg": bench_iceberg, "iceberg-follow": bench_iceberg_follow}
        for name, bench in benches.items():
            if args.only in (None, name):
                bench(eddy, args.rows, tmp)
    finally:
        eddy.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
