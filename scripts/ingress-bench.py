#!/usr/bin/env python3
"""HTTP ingress throughput with and without fault tolerance (the journal
syncs every request to disk before it is answered).

Usage: scripts/ingress-bench.py EDDY_BINARY [REQUESTS] [ROWS_PER_REQUEST]

Starts `eddy serve` on a free loopback port with a scratch data directory,
sends REQUESTS sequential requests of ROWS_PER_REQUEST inserts to a table
with a primary key (one connection), waits for the last completion token,
and prints requests/s, rows/s and the mean request latency for each mode.
With fault tolerance it then kills the server (SIGKILL) and times the next
start until it is ready: first replaying the whole journal, then, after a
checkpoint, restoring it.
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


def request(conn, method, path, body=None):
    conn.request(method, path, body=body)
    resp = conn.getresponse()
    data = resp.read()
    if resp.status >= 300:
        raise SystemExit(f"{method} {path}: {resp.status} {data[:300]!r}")
    return json.loads(data) if data.strip() else None


def serve(binary, data_dir):
    """Starts `eddy serve`; returns the process, a connection and the
    seconds until it was ready."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [binary, "serve", "--bind", "127.0.0.1:0", "--data-dir", data_dir],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = proc.stdout.readline()
    ready = time.perf_counter() - started
    host, port = line.strip().rsplit("/", 1)[-1].split(":")
    return proc, http.client.HTTPConnection(host, int(port), timeout=60), ready


def count(conn):
    rows = request(conn, "GET", "/v0/pipelines/b/query?format=json&sql=SELECT%20SUM(n)%20AS%20n%20FROM%20v")
    return rows["n"] if rows else None


def run(binary, requests, rows, fault_tolerance):
    data_dir = tempfile.mkdtemp(prefix="eddy-ingress-bench-")
    proc, conn, _ = serve(binary, data_dir)
    try:
        config = {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 3600}} if fault_tolerance else {}
        body = {
            "program_code": "CREATE TABLE t (id BIGINT NOT NULL PRIMARY KEY, k BIGINT);\n"
            "CREATE VIEW v AS SELECT k, COUNT(*) AS n FROM t GROUP BY k;",
            "runtime_config": config,
        }
        request(conn, "PUT", "/v0/pipelines/b", json.dumps(body))
        request(conn, "POST", "/v0/pipelines/b/start")
        path = "/v0/pipelines/b/ingress/t?format=json&update_format=insert_delete"
        started = time.perf_counter()
        token = None
        for r in range(requests):
            text = "".join(
                json.dumps({"insert": {"id": r * rows + i, "k": i % 10}}) + "\n" for i in range(rows)
            )
            token = request(conn, "POST", path, text)["token"]
        sent = time.perf_counter() - started
        while request(conn, "GET", f"/v0/pipelines/b/completion_status?token={token}")["status"] != "complete":
            time.sleep(0.005)
        done = time.perf_counter() - started
        mode = "fault tolerance (journal)" if fault_tolerance else "no fault tolerance"
        print(
            f"{mode:28} {requests / done:9.0f} requests/s {requests * rows / done:11.0f} rows/s "
            f"{sent / requests * 1000:7.2f} ms per request"
        )
        if fault_tolerance:
            proc.kill()
            proc.wait()
            started = time.perf_counter()
            proc, conn, ready = serve(binary, data_dir)
            while count(conn) != requests * rows:
                time.sleep(0.005)
            caught_up = time.perf_counter() - started
            print(
                f"{'  after kill -9, replaying':28} the journal ({requests} records): "
                f"ready in {ready * 1000:.0f} ms, caught up in {caught_up * 1000:.0f} ms"
            )
            request(conn, "POST", "/v0/pipelines/b/checkpoint")
            proc.kill()
            proc.wait()
            proc, conn, ready = serve(binary, data_dir)
            assert count(conn) == requests * rows, count(conn)
            print(f"{'  after kill -9, restoring':28} the checkpoint: ready (and caught up) in {ready * 1000:.0f} ms")
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(data_dir, ignore_errors=True)


def main():
    binary = sys.argv[1]
    requests = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    rows = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    print(f"{requests} requests of {rows} rows, one connection")
    run(binary, requests, rows, False)
    run(binary, requests, rows, True)


if __name__ == "__main__":
    main()
