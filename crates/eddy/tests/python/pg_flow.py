"""psycopg (from PyPI, unchanged) against Eddy's PostgreSQL door: the
extended query protocol with parameters, prepared statements, transactions,
types, and errors that leave the connection usable.

Usage: python pg_flow.py PORT [API_KEY]   (pipeline `p` of tests/pgwire.rs)
"""

import datetime
import decimal
import sys

import psycopg

port = int(sys.argv[1])
key = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else None

conninfo = dict(host="127.0.0.1", port=port, user="eddy", dbname="p", sslmode="disable")
if key:
    conninfo["password"] = key

with psycopg.connect(**conninfo, autocommit=True) as conn:
    cur = conn.cursor()

    # INSERT with parameters, then a SELECT on the same connection sees it.
    cur.execute(
        "INSERT INTO t (id, n, x, s, b, d, ts, amount) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (
            5,
            50,
            2.5,
            "eve",
            True,
            datetime.date(2024, 2, 29),
            datetime.datetime(2024, 2, 29, 12, 30, 0),
            decimal.Decimal("7.25"),
        ),
    )
    assert cur.rowcount == 1, cur.rowcount
    assert cur.statusmessage == "INSERT 0 1", cur.statusmessage
    cur.executemany("INSERT INTO t (id, n) VALUES (%s, %s)", [(6, 60), (7, 70)])

    cur.execute("SELECT id, n, x, s, b, d, ts, amount FROM v WHERE id = %s", (5,))
    row = cur.fetchone()
    assert row == (
        5,
        50,
        2.5,
        "eve",
        True,
        datetime.date(2024, 2, 29),
        datetime.datetime(2024, 2, 29, 12, 30, 0),
        decimal.Decimal("7.25"),
    ), row
    names = [c.name for c in cur.description]
    assert names == ["id", "n", "x", "s", "b", "d", "ts", "amount"], names
    types = [c.type_code for c in cur.description]
    # int8, int4, float8, varchar, bool, date, timestamp, numeric
    assert types == [20, 23, 701, 1043, 16, 1082, 1114, 1700], types

    cur.execute("SELECT id FROM v WHERE s = %s OR n > %s ORDER BY id", ("eve", 55))
    assert cur.fetchall() == [(5,), (6,), (7,)]

    # Binary results.
    bcur = conn.cursor(binary=True)
    bcur.execute("SELECT id, x, s, d, amount FROM v WHERE id = %s", (5,))
    assert bcur.fetchone() == (
        5,
        2.5,
        "eve",
        datetime.date(2024, 2, 29),
        decimal.Decimal("7.25"),
    )

    # NULLs both ways.
    cur.execute("INSERT INTO t (id, s) VALUES (%s, %s)", (8, None))
    cur.execute("SELECT s, n FROM v WHERE id = %s", (8,))
    assert cur.fetchone() == (None, None)

    # A prepared statement, run often enough that psycopg prepares it.
    for i in range(8):
        cur.execute("SELECT count(*) FROM v WHERE id >= %s", (i,), prepare=True)
        cur.fetchone()

    # DELETE by key, with its row count; the view follows.
    cur.execute("DELETE FROM t WHERE id = %s", (6,))
    assert cur.rowcount == 1, cur.rowcount
    cur.execute("SELECT cnt FROM totals")
    assert cur.fetchone() == (3,)

    # Errors carry a SQLSTATE and the connection goes on.
    for bad, state in [
        ("SELEC 1", "42601"),
        ("CREATE TABLE z (a INT)", "25006"),
        ("SELECT * FROM nope", "42P01"),
    ]:
        try:
            cur.execute(bad)
            raise AssertionError(f"{bad} succeeded")
        except psycopg.Error as e:
            assert e.sqlstate == state, (bad, e.sqlstate, str(e))
    cur.execute("SELECT %s::int + 1", (41,))
    assert cur.fetchone() == (42,)

# A transaction (psycopg's default): changes become visible at COMMIT.
with psycopg.connect(**conninfo) as conn:
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t (id, n) VALUES (%s, %s)", (20, 1))
        cur.execute("INSERT INTO t (id, n) VALUES (%s, %s)", (21, 1))
    conn.commit()
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM v WHERE id >= 20")
        assert cur.fetchone() == (2,)
    conn.commit()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t (id, n) VALUES (%s, %s)", (22, 1))
    conn.rollback()
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM v WHERE id >= 20")
        assert cur.fetchone() == (2,)

# A wrong password is refused.
if key:
    try:
        psycopg.connect(**{**conninfo, "password": "wrong"})
        raise AssertionError("a wrong password was accepted")
    except psycopg.OperationalError as e:
        assert "28P01" in str(e) or "password" in str(e), str(e)

print("pg flow: OK")
