#!/usr/bin/env python3
"""Feldera's own SQL test suite (runtime_aggtest), run against `eddy serve`.

Each folder of Feldera's `python/tests/runtime_aggtest/` registers tables
(rows) and views (expected contents, or an expected error) through its
`main.py`. Feldera's framework (`aggtst_base.py`) puts a folder's views into
one pipeline, so one refused view hides the rest; this runner measures each
test on its own, through the same framework code and Feldera's own Python
client (`feldera` from PyPI, the suite's version):

* a view is deployed with the tables and views it reads (found by name,
  transitively), the tables' rows are pushed, and the framework's
  `View.validate` compares its contents;
* a view that expects an error passes only when its program is refused or
  fails with the expected text *and* the program without it (its tables
  and the views it reads) runs: an error raised by a table the view needs
  proves nothing about the view;
* a folder's tables are deployed together and each table that expects an
  error alone, as the framework does.

Usage: feldera-suite.py --eddy PATH [--suite DIR] [--jobs N] [--floor FILE]
       [--results FILE] [--only FOLDER[,FOLDER]] [--update-failures FILE]

It starts `eddy serve` on a free loopback port with a scratch data folder,
prints one line per failing test and a summary by cause, and ends with
`N passed, M failed`. With `--floor`, it exits 1 when fewer tests pass than
the number on the floor file's first line.
"""

import argparse
import collections
import concurrent.futures
import importlib.util
import itertools
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback


def parse_args():
    here = os.path.dirname(os.path.abspath(__file__))
    default_suite = os.path.normpath(
        os.path.join(here, "..", "..", "shared", "feldera-sql-tests", "python")
    )
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eddy", required=True, help="the eddy binary")
    p.add_argument("--suite", default=default_suite, help="Feldera's python/ folder")
    p.add_argument("--jobs", type=int, default=6, help="tests run at once")
    p.add_argument("--workers", type=int, default=2, help="runtime_config.workers")
    p.add_argument("--floor", help="fail when fewer pass than this file's first line")
    p.add_argument("--results", help="write one JSON line per test here")
    p.add_argument("--only", help="comma-separated folders to run")
    p.add_argument("--tests", help="comma-separated test names to run")
    return p.parse_args()


class Server:
    """`eddy serve` on 127.0.0.1:0; stopped by `stop`."""

    def __init__(self, eddy):
        self.dir = tempfile.mkdtemp(prefix="eddy-feldera-suite-")
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        env = dict(os.environ)
        env.pop("EDDY_API_KEY", None)
        env.setdefault("EDDY_LOG", "warn")
        self.proc = subprocess.Popen(
            [eddy, "serve", "--bind", "127.0.0.1:0", "--data-dir",
             os.path.join(self.dir, "data")],
            stdout=subprocess.PIPE, stderr=self.log, env=env, text=True,
        )
        line = self.proc.stdout.readline().strip()
        prefix = "eddy listening on "
        if not line.startswith(prefix):
            self.stop()
            sys.exit(f"eddy serve did not start: {line!r}")
        self.url = line[len(prefix):]
        # Keep reading its stdout so that it never blocks on a full pipe.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def folders(suite):
    """(folder, class prefix, module prefixes, module files in import order)."""
    root = os.path.join(suite, "tests", "runtime_aggtest")
    out = []
    for name in sorted(os.listdir(root)):
        main = os.path.join(root, name, "main.py")
        if not os.path.isfile(main):
            continue
        text = open(main).read()
        m = re.search(r'run\(\s*"[^"]*"\s*,\s*"([^"]+)"', text)
        if not m:
            continue
        # A folder's own modules, and another folder's that its main.py
        # imports (`from tests.runtime_aggtest.illarg_tests.test_illegal_tbl
        # import *`: a table the folder's views read).
        modules = [
            (other or name, mod)
            for other, mod in re.findall(
                r"^from\s+(?:tests\.runtime_aggtest\.(\w+)\.)?(\w+)\s+import\s+\*", text, re.M
            )
            if other or "." not in mod
        ]
        out.append((name, m.group(1), modules))
    return root, out


def load_folder(root, name, class_prefix, modules, base):
    """Registers a folder's tests, as its main.py would, into a fresh
    accumulator; modules are loaded under names of their own, since
    folders reuse file names."""
    from tests.runtime_aggtest.atest_register_tests import register_tests_in_module

    ta = base.TstAccumulator()
    for folder, mod in modules:
        path = os.path.join(root, folder, mod + ".py")
        spec = importlib.util.spec_from_file_location(f"suite_{name}_{folder}_{mod}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        register_tests_in_module(module, ta, class_prefix)
    return ta


def reads(sql, names):
    """The names of `names` that `sql` mentions as words."""
    return [n for n in names if re.search(r"\b" + re.escape(n) + r"\b", sql, re.I)]


class Folder:
    """A folder's tables and views, and what each view needs."""

    def __init__(self, name, ta, base):
        self.name = name
        self.base = base
        fails = base.TstAccumulator.has_expected_error
        self.tables = [t for t in ta.tables if not fails(t)]
        self.failing_tables = [t for t in ta.tables if fails(t)]
        self.views = ta.views

    def needs(self, view):
        """The tables and the other views `view` reads, transitively, in
        the order the folder declares them."""
        # A view that shares the name of the view under test is another
        # test (Feldera runs each view that expects an error on its own).
        others = [w for w in self.views if w.name.lower() != view.name.lower()]
        by_name = {v.name.lower(): v for v in others}
        seen, todo = set(), [view]
        while todo:
            v = todo.pop()
            for n in reads(v.sql, [w.name for w in others]):
                if n.lower() not in seen:
                    seen.add(n.lower())
                    todo.append(by_name[n.lower()])
        deps = [v for v in others if v.name.lower() in seen]
        text = " ".join([view.sql] + [d.sql for d in deps])
        chosen = {t.name for t in self.tables if reads(text, [t.name])}
        # Feldera deploys a folder's tables together, so a type or a
        # function that one table's program defines (`CREATE TYPE`, `CREATE
        # FUNCTION`) serves the others: a table that defines one that the
        # view or the chosen tables use comes along.
        defines = {}
        for t in self.tables:
            for m in re.finditer(r"CREATE\s+(?:TYPE|FUNCTION)\s+(\w+)", t.sql, re.I):
                defines.setdefault(m.group(1).lower(), t.name)
        while True:
            text = " ".join([text] + [t.sql for t in self.tables if t.name in chosen])
            more = {defines[n] for n in reads(text, list(defines))} - chosen
            if not more:
                break
            chosen |= more
        tables = [t for t in self.tables if t.name in chosen]
        return tables, deps


class Named:
    """What a test of a folder's tables is named."""

    def __init__(self, name):
        self.name = name


def first_lines(text, n=3, width=300):
    lines = [l.strip() for l in str(text).strip().splitlines() if l.strip()]
    return " | ".join(lines[:n])[:width]


def cause(exc, base):
    if isinstance(exc, base.CompileTimeError):
        return "refused at deploy"
    if isinstance(exc, AssertionError):
        return "wrong contents"
    return "runtime error"


def run_one(test, base, counter):
    """Runs one test; returns a result dict."""
    kind, folder, obj = test
    n = next(counter)
    prefix = f"s{n}"
    acc = base.TstAccumulator()
    result = {"folder": folder.name, "kind": kind, "name": obj.name}
    try:
        if kind == "tables":
            sql = acc.generate_sql(folder.tables, [])
            acc.run_pipeline(prefix, sql, views=[], tables=folder.tables)
        elif kind == "error-table":
            acc.run_failing_object_test(obj, prefix, obj.get_sql(), [], [obj])
        elif kind == "view":
            tables, deps = folder.needs(obj)
            sql = acc.generate_sql(tables, deps + [obj])
            acc.run_pipeline(prefix, sql, views=[obj], tables=tables)
        else:  # an error-view
            tables, deps = folder.needs(obj)
            try:
                acc.run_pipeline(prefix + "b", acc.generate_sql(tables, deps), [], tables)
            except Exception as e:  # noqa: BLE001 - reported as the cause
                result.update(ok=False, cause="what it reads fails without it",
                              message=first_lines(underlying(e)))
                return result
            sql = acc.generate_sql(tables, deps + [obj])
            acc.run_failing_object_test(obj, prefix, sql, [obj], tables)
        result["ok"] = True
    except AssertionError as e:
        text = str(e)
        if kind.startswith("error"):
            c = "no error raised" if "expected to fail" in text else "another error"
        else:
            c = "wrong contents"
        result.update(ok=False, cause=c, message=first_lines(text, 8, 1500))
    except Exception as e:  # noqa: BLE001 - every failure is a result
        e = underlying(e)
        result.update(ok=False, cause=cause(e, base), message=first_lines(e, 8, 1500))
    return result


def underlying(e):
    """The failure itself: the framework's clean-up can raise over the
    failure it cleans up after (a refused program leaves no pipeline to
    look up)."""
    while isinstance(e.__context__, Exception) and "not found" in str(e):
        e = e.__context__
    return e


def main():
    args = parse_args()
    server = Server(args.eddy)
    os.environ["FELDERA_HOST"] = server.url
    os.environ["FELDERA_TEST_NUM_WORKERS"] = str(args.workers)
    os.environ.setdefault("LOGLEVEL", "ERROR")
    sys.path.insert(0, args.suite)
    started = time.time()
    try:
        from tests.runtime_aggtest import aggtst_base as base

        logging.getLogger().setLevel(logging.ERROR)
        root, found = folders(args.suite)
        only = set(args.only.split(",")) if args.only else None
        names = set(args.tests.split(",")) if args.tests else None
        tests = []
        for name, class_prefix, modules in found:
            if only and name not in only:
                continue
            folder = Folder(name, load_folder(root, name, class_prefix, modules, base), base)
            if folder.tables:
                tests.append(("tables", folder, Named("(tables)")))
            tests += [("error-table", folder, t) for t in folder.failing_tables]
            for v in folder.views:
                fails = base.TstAccumulator.has_expected_error(v)
                tests.append(("error-view" if fails else "view", folder, v))
        if names:
            tests = [t for t in tests if t[2].name in names]
        counter = itertools.count()
        results = []
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            for r in pool.map(lambda t: run_one(t, base, counter), tests):
                results.append(r)
                if not r["ok"]:
                    print(f"FAIL {r['folder']}/{r['name']} ({r['kind']}): "
                          f"{r['cause']}: {r['message']}", flush=True)
    finally:
        server.stop()

    if args.results:
        with open(args.results, "w") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")
    summarize(results, time.time() - started)
    passed = sum(r["ok"] for r in results)
    failed = len(results) - passed
    print(f"{passed} passed, {failed} failed")
    if args.floor:
        floor = int(open(args.floor).readline().split()[0])
        if passed < floor:
            print(f"below the floor: {passed} passed, the floor is {floor} ({args.floor})")
            sys.exit(1)
        print(f"floor {floor} ok")


def summarize(results, seconds):
    print(f"\n== Feldera's suite: {len(results)} tests in {seconds:.0f} s")
    tally(results, "kind", 12)
    causes = collections.Counter(r["cause"] for r in results if not r["ok"])
    for c, n in causes.most_common():
        print(f"  failed, {c}: {n}")
    tally(results, "folder", 22)


def tally(results, field, width):
    """Prints how many tests passed and failed for each value of `field`."""
    counts = {}
    for r in results:
        counts.setdefault(r[field], [0, 0])[0 if r["ok"] else 1] += 1
    for name, (p, f) in sorted(counts.items()):
        print(f"  {name:{width}} {p:5} passed {f:5} failed")


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        sys.exit(2)
