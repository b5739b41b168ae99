"""Writes an Iceberg table with PyIceberg (its SQL catalog in SQLite, or
its Glue catalog in moto's server; the files on the local disk or in S3),
for crates/eddy/tests/iceberg.rs.

    iceberg.py CATALOG WAREHOUSE [S3_ENDPOINT] OP...

CATALOG is the SQLite file of a SQL catalog, or `glue`: the Glue catalog
at S3_ENDPOINT (moto's server answers both APIs).

OPs, applied in order to the table `ns.items`; after each, one JSON line
with the table's metadata location and current snapshot:
    create             id BIGINT NOT NULL, name, amount DECIMAL(10,2), ts, day
    create_partitioned the same, partitioned by day (identity)
    append FROM TO     rows FROM..=TO (one data file)
    add_files FROM TO  rows FROM..=TO written by pyarrow without field ids
                       and added as they are (a migrated table's files; the
                       table gets a name mapping); a local warehouse only
    delete FROM TO     deletes rows FROM..=TO (copy-on-write: files rewritten)
    overwrite FROM TO  replaces every row by rows FROM..=TO
    rename OLD NEW     renames a column (no file rewritten)
"""

import datetime
import decimal
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.glue import GlueCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import And, GreaterThanOrEqual, LessThanOrEqual

args = sys.argv[1:]
db, warehouse = args[0], args[1]
props = {"warehouse": warehouse}
ops = args[2:]
if ops and ops[0].startswith("http"):
    props.update({
        "s3.endpoint": ops[0],
        "s3.access-key-id": "eddy",
        "s3.secret-access-key": "eddy-secret",
        "s3.region": "us-east-1",
    })
    ops = ops[1:]
if db == "glue":
    props.update({
        "glue.endpoint": props["s3.endpoint"],
        "glue.access-key-id": "eddy",
        "glue.secret-access-key": "eddy-secret",
        "glue.region": "us-east-1",
    })
    catalog = GlueCatalog("lake", **props)
else:
    catalog = SqlCatalog("lake", uri=f"sqlite:///{db}", **props)

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("name", pa.string()),
    pa.field("amount", pa.decimal128(10, 2)),
    pa.field("ts", pa.timestamp("us")),
    pa.field("day", pa.date32()),
])


def rows(lo, hi):
    ids = list(range(lo, hi + 1))
    t0 = datetime.datetime(2024, 1, 1)
    return pa.table({
        "id": ids,
        "name": [f"n{i}" for i in ids],
        "amount": [decimal.Decimal(i) / 100 for i in ids],
        "ts": [t0 + datetime.timedelta(seconds=i) for i in ids],
        "day": [(t0 + datetime.timedelta(days=i % 30)).date() for i in ids],
    }, schema=SCHEMA)


i = 0
while i < len(ops):
    op = ops[i]
    if op in ("create", "create_partitioned"):
        catalog.create_namespace_if_not_exists("ns")
        table = catalog.create_table("ns.items", schema=SCHEMA)
        if op == "create_partitioned":
            with table.update_spec() as spec:
                spec.add_identity("day")
        i += 1
    else:
        table = catalog.load_table("ns.items")
        lo, hi = ops[i + 1], ops[i + 2]
        if op == "append":
            names = [f.name for f in table.schema().fields]
            table.append(rows(int(lo), int(hi)).rename_columns(names))
        elif op == "add_files":
            if not warehouse.startswith("file://"):
                sys.exit("add_files: a local warehouse only")
            folder = warehouse[len("file://"):] + "/added"
            os.makedirs(folder, exist_ok=True)
            path = f"{folder}/items-{lo}-{hi}.parquet"
            names = [f.name for f in table.schema().fields]
            pq.write_table(rows(int(lo), int(hi)).rename_columns(names), path)
            table.add_files([f"file://{path}"])
        elif op == "overwrite":
            names = [f.name for f in table.schema().fields]
            table.overwrite(rows(int(lo), int(hi)).rename_columns(names))
        elif op == "delete":
            table.delete(And(GreaterThanOrEqual("id", int(lo)), LessThanOrEqual("id", int(hi))))
        elif op == "rename":
            with table.update_schema() as update:
                update.rename_column(lo, hi)
        else:
            sys.exit(f"unknown op {op}")
        i += 3
    table = catalog.load_table("ns.items")
    snap = table.current_snapshot()
    print(json.dumps({
        "metadata_location": table.metadata_location,
        "snapshot_id": snap.snapshot_id if snap else None,
        "datetime": datetime.datetime.fromtimestamp(
            snap.timestamp_ms / 1000, tz=datetime.timezone.utc).isoformat() if snap else None,
    }), flush=True)
