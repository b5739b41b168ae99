"""Compares the c* views of `eddy run --format csv` output with DuckDB's
answers over the `<table>-all.csv` files; exits 1 on a difference."""
import collections
import csv
import sys

import duckdb

con = duckdb.connect()
for line in open(__file__.replace("compare.py", "tables.sql")).read().split(";"):
    if line.strip():
        con.execute(line.replace("LATENESS INTERVAL 4 SECONDS", "").replace("TIMESTAMP(3)", "TIMESTAMP"))
for t in ["person", "auction", "bid"]:
    con.execute(f"INSERT INTO {t} SELECT * FROM read_csv('{t}-all.csv', header=false, nullstr='', "
                f"columns={{ {', '.join(repr(r[0]) + ': ' + repr(r[1]) for r in con.execute(f'DESCRIBE {t}').fetchall())} }})")
sections, name = {}, None
for line in open(sys.argv[1]).read().split("\n"):
    if line.startswith("# "):
        name = line[2:]
        sections[name] = []
    elif name and line:
        sections[name].append(line)


def eddy(v):
    return collections.Counter(tuple(r) for r in csv.reader(sections[v][1:]))


def duck(q):
    return collections.Counter(tuple("" if x is None else str(x) for x in r) for r in con.execute(q).fetchall())


hop = ("(SELECT b.*, time_bucket(INTERVAL '2 seconds', date_time) - k * INTERVAL '2 seconds' AS ws "
       "FROM bid b, range(0, 5) r(k))")
tumble = "time_bucket(INTERVAL '10 seconds', date_time)"
checks = {
    "c5": f"""SELECT a.auction, a.num FROM (SELECT auction, count(*) num, ws FROM {hop} GROUP BY auction, ws) a
              JOIN (SELECT max(num) maxn, ws FROM (SELECT count(*) num, ws FROM {hop} GROUP BY auction, ws) GROUP BY ws) m
              ON a.ws = m.ws AND a.num >= m.maxn""",
    "c7": f"""SELECT B.auction, B.price, B.bidder FROM bid B
              JOIN (SELECT MAX(price) maxprice, {tumble} + INTERVAL '10 seconds' AS dt FROM bid GROUP BY {tumble}) B1
              ON B.price = B1.maxprice WHERE B.date_time BETWEEN B1.dt - INTERVAL '10 seconds' AND B1.dt""",
    "c8": f"""SELECT P.id, P.name, CAST(EXTRACT(EPOCH FROM P.s) AS BIGINT)
              FROM (SELECT id, name, {tumble} s FROM person GROUP BY id, name, s) P
              JOIN (SELECT seller, {tumble} s FROM auction GROUP BY seller, s) A ON P.id = A.seller AND P.s = A.s""",
    "c12": f"SELECT bidder, count(*), CAST(EXTRACT(EPOCH FROM {tumble}) AS BIGINT) s FROM bid GROUP BY bidder, s",
    "c16": """SELECT channel, strftime(max(date_time), '%H:%M'), count(*), count(*) filter (where price < 10000),
              count(distinct bidder), count(distinct auction) filter (where price >= 1000000)
              FROM bid GROUP BY channel, CAST(date_time AS DATE)""",
    # Ties in price make ROW_NUMBER's choice free: compare (auction, price).
    "c19": """SELECT auction, price FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) rn
              FROM bid) WHERE rn <= 10""",
    "c22": "SELECT auction, string_split(url, '/')[4], string_split(url, '/')[5], string_split(url, '/')[6] FROM bid WHERE auction < 5",
}
failed = False
for v, q in checks.items():
    e, d = eddy(v), duck(q)
    same = e == d
    failed |= not same
    print(f"{v}: eddy {sum(e.values())} rows, duckdb {sum(d.values())} rows: {'equal' if same else 'DIFFERENT'}")
    if not same:
        print("  only in eddy:", list((e - d).items())[:5])
        print("  only in duckdb:", list((d - e).items())[:5])
sys.exit(1 if failed else 0)
