#!/usr/bin/env python3
"""Fills the expected answers of a sqllogictest file from DuckDB.

Usage: scripts/slt-expect-duckdb.py IN.slt.in OUT.slt

The input holds `statement ok` records (run on DuckDB as they are) and
`query <types> [rowsort|nosort]` records without answers. Each query is run
on DuckDB and its answer is written below a `----` line, formatted as the
sqllogictest runner prints values (`I` integer, `R` three decimals, `T`
text, `(empty)`, `NULL`). Answers computed by another engine keep Eddy's
own tests honest: nothing in them was produced by Eddy.

Needs the `duckdb` package from PyPI.
"""
import sys

import duckdb


def fmt(v, t):
    if v is None:
        return "NULL"
    if t == "I":
        if isinstance(v, bool):
            return str(int(v))
        if isinstance(v, float):
            return str(int(v))
        return str(int(v)) if not isinstance(v, str) else v
    if t == "R":
        return "%.3f" % float(v)
    s = str(v)
    if isinstance(v, bool):
        s = "true" if v else "false"
    return "(empty)" if s == "" else s


def main():
    src, dst = sys.argv[1], sys.argv[2]
    con = duckdb.connect()
    records = open(src).read().split("\n\n")
    out = []
    for rec in records:
        lines = rec.strip("\n").split("\n")
        alt = [l[len("# duckdb:"):].strip() for l in lines if l.startswith("# duckdb:")]
        head = [l for l in lines if l.startswith("#") and not l.startswith("# duckdb:")]
        body = [l for l in lines if not l.startswith("#")]
        if not body:
            out.append("\n".join(head))
            continue
        first = body[0].split()
        sql = "\n".join(body[1:])
        if first[0] == "statement":
            if first[1] == "ok":
                con.execute(sql)
            out.append(rec.strip("\n"))
        elif first[0] == "query":
            types = first[1]
            sort = first[2] if len(first) > 2 else "nosort"
            rows = con.execute(alt[0] if alt else sql).fetchall()
            vals = [[fmt(v, types[i]) for i, v in enumerate(r)] for r in rows]
            if sort == "rowsort":
                vals.sort()
            out.append("\n".join(head + body + ["----"] + [" ".join(r) for r in vals]))
        else:
            out.append(rec.strip("\n"))
    open(dst, "w").write("\n\n".join(out) + "\n")


if __name__ == "__main__":
    main()
