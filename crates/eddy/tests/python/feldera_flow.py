"""Feldera's own Python client (the `feldera` package from PyPI, unchanged)
driving an Eddy server: create, start, listen, input, query, stop, delete.

Usage: python feldera_flow.py URL [API_KEY]
"""

import sys

from feldera import FelderaClient, PipelineBuilder

url = sys.argv[1]
api_key = sys.argv[2] if len(sys.argv) > 2 else None
client = FelderaClient(url, api_key=api_key)

SQL = """
CREATE TABLE people (id INT NOT NULL PRIMARY KEY, name VARCHAR, city VARCHAR)
    WITH ('materialized' = 'true');
CREATE MATERIALIZED VIEW per_city AS
    SELECT city, COUNT(*) AS n FROM people GROUP BY city;
"""

pipeline = PipelineBuilder(client, name="pyflow", sql=SQL).create_or_replace()
pipeline.start()
handle = pipeline.listen("per_city")

pipeline.input_json(
    "people",
    [
        {"id": 1, "name": "ann", "city": "Oslo"},
        {"id": 2, "name": "bob", "city": "Oslo"},
        {"id": 3, "name": "cy", "city": "Lima"},
    ],
)
token = pipeline.input_json(
    "people",
    [{"delete": {"id": 2, "name": "bob", "city": "Oslo"}}],
    update_format="insert_delete",
)
handle.wait_for_token(token)

rows = sorted(pipeline.query("SELECT city, n FROM per_city"), key=lambda r: r["city"])
assert rows == [{"city": "Lima", "n": 1}, {"city": "Oslo", "n": 1}], rows

changes = handle.to_dict()
inserted = sorted(
    (c["city"], c["n"]) for c in changes if c["insert_delete"] == 1
)
deleted = sorted((c["city"], c["n"]) for c in changes if c["insert_delete"] == -1)
assert inserted == [("Lima", 1), ("Oslo", 1), ("Oslo", 2)], changes
assert deleted == [("Oslo", 2)], changes

stats = pipeline.stats()
assert stats.global_metrics.total_processed_records == 4, stats.global_metrics

# Creating it again replaces the stopped definition.
pipeline.stop(force=True)
pipeline = PipelineBuilder(client, name="pyflow", sql=SQL).create_or_replace()
pipeline.start()
pipeline.input_json("people", {"id": 9, "name": "di", "city": "Rome"})
assert list(pipeline.query("SELECT COUNT(*) AS c FROM people")) == [{"c": 1}]
pipeline.stop(force=True)
pipeline.delete()
assert all(p.name != "pyflow" for p in client.pipelines())
print("feldera client flow: OK")
