"""Sorts eddy-slt's wrong results against a real PostgreSQL.

    EDDY_SLT_FAILURES=100000 eddy-slt FILES... > LOG
    python3 scripts/postgres-differences.py LOG [LIST]

For each wrong result in LOG ("line N: SQL" / "expected [...] got [...]"),
runs the file's statements (those a PostgreSQL engine runs: skipif/onlyif
as eddy-slt decides them) on a fresh schema of the local database `slt`
(psycopg's defaults: PGHOST, PGUSER, ...), then the query, formats the
answer as eddy-slt does (I: integer, a real truncated toward zero; R: three
decimals; T: text), and prints whether PostgreSQL gives Eddy's answer, the
expected (SQLite's) one, another one, or an error. With LIST, writes the
queries where PostgreSQL gives Eddy's answer (rule one-type-for-all-branches:
all of them so far were CASE/COALESCE typing) or fails where Eddy answers
NULL (rule a-failing-expression-is-NULL), for `eddy-slt --differences`.
Review the list's rules before committing it.

Needs PostgreSQL (Debian's `postgresql`) and psycopg (`pip install
psycopg[binary]`); nothing here runs in CI."""
import re, sys, math, decimal
import psycopg

def records(path):
    lines = open(path, encoding='utf-8', errors='replace').read().split('\n')
    i, n = 0, len(lines)
    conds = []
    while i < n:
        l = lines[i]
        if not l.strip() or l.startswith('#'):
            i += 1; continue
        start = i + 1
        w = l.split()
        if w[0] in ('skipif', 'onlyif'):
            conds.append((w[0], w[1])); i += 1; continue
        if w[0] in ('statement', 'query'):
            j = i + 1; sql = []
            while j < n and lines[j].strip() and lines[j] != '----':
                sql.append(lines[j]); j += 1
            if j < n and lines[j] == '----':
                j += 1
                while j < n and lines[j].strip():
                    j += 1
            yield start, w, conds, '\n'.join(sql)
            conds = []
            i = j; continue
        conds = []
        i += 1

def skipped(conds):
    for k, lab in conds:
        if k == 'onlyif' and lab not in ('postgresql', 'eddy'): return True
        if k == 'skipif' and lab in ('postgresql', 'eddy'): return True
    return False

def fmt(v, t):
    if v is None: return 'NULL'
    if t == 'I':
        if isinstance(v, bool): return str(int(v))
        if isinstance(v, int): return str(v)
        if isinstance(v, (float, decimal.Decimal)): return str(int(v))
        m = re.match(r'\s*[-+]?\d+', str(v)); return m.group(0).strip() if m else '0'
    if t == 'R':
        return '%.3f' % float(v)
    s = str(v)
    return s if s else '(empty)'

def main(log, out=None):
    fails = {}
    cur = None
    text = open(log).read().split('\n')
    k = 0
    while k < len(text):
        l = text[k]
        if l.startswith('/'):
            cur = l.split(':')[0]
        m = re.match(r'  line (\d+): ', l)
        if m and k + 1 < len(text):
            r = re.match(r'    expected \[(.*)\] got \[(.*)\]$', text[k+1])
            if r:
                fails.setdefault(cur, {})[int(m.group(1))] = (r.group(1).split(' '), r.group(2).split(' '))
        k += 1
    tally = {}
    listed = []
    conn = psycopg.connect('dbname=slt', autocommit=True)
    for path, lines in fails.items():
        cur_ = conn.cursor()
        cur_.execute("drop schema public cascade; create schema public")
        for start, w, conds, sql in records(path):
            if skipped(conds): continue
            if w[0] == 'statement':
                try: cur_.execute(sql)
                except Exception as e: pass
            elif start in lines:
                exp, got = lines[start]
                types = w[1]
                try:
                    cur_.execute(sql)
                    rows = cur_.fetchall()
                    pg = [fmt(v, types[i] if i < len(types) else 'T') for r in rows for i, v in enumerate(r)]
                    verdict = 'postgres=eddy' if sorted(pg) == sorted(got) else ('postgres=sqlite' if sorted(pg) == sorted(exp) else 'postgres other')
                except Exception as e:
                    pg = ['ERROR ' + str(e).split('\n')[0]]
                    verdict = 'postgres error'
                tally[verdict] = tally.get(verdict, 0) + 1
                listed.append((verdict, path, start))
                print(f"{verdict}\t{path}:{start}\texp={exp} eddy={got} pg={pg}\t{' '.join(sql.split())}")
    print(tally, file=sys.stderr)
    if out:
        rules = {'postgres=eddy': 'one-type-for-all-branches',
                 'postgres error': 'a-failing-expression-is-NULL'}
        with open(out, 'w') as f:
            f.write(HEADER)
            for verdict, path, line in listed:
                if verdict in rules:
                    f.write(f"{path.split('/test/', 1)[-1]}:{line} {rules[verdict]}\n")

HEADER = """# Queries of the SQLite sqllogictest corpus (gregrahn/sqllogictest, test/)
# where SQLite and PostgreSQL answer differently and the corpus has no
# `skipif postgresql`: Eddy gives PostgreSQL's answer (or, for
# a-failing-expression-is-NULL, NULL where PostgreSQL stops with an error).
# Each was run on PostgreSQL by scripts/postgres-differences.py, which wrote
# this list. `eddy-slt --differences FILE` counts their failures as
# documented differences; the rules are in docs/sql.md ("Where Eddy and
# SQLite differ") and crates/eddy-slt/src/differences.rs.
#
# PATH:LINE RULE
"""

main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
