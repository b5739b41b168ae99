#!/usr/bin/env bash
# Runs Feldera's Nexmark SQL programs, text unchanged, through `eddy run`
# over a generated stream (out of order within the 4 s lateness, six steps)
# and compares the answers with DuckDB's over the same rows, asked in
# DuckDB's own SQL (time_bucket, a series of hop offsets).
#
# Usage: scripts/nexmark/check-vs-duckdb.sh QUERIES_DIR [EDDY] [EVENTS]
#   QUERIES_DIR: benchmark/feldera-sql/benchmarks/nexmark/queries of a
#                checkout of github.com/feldera/feldera (read, not copied)
#   EDDY:        the eddy binary (default: target/release/eddy)
#   EVENTS:      how many events (default 30000)
# Needs python3 with the duckdb package.
set -euo pipefail
queries=$(cd "$1" && pwd)
eddy=$(realpath "${2:-target/release/eddy}")
events=${3:-30000}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
python3 "$here/generate.py" "$events"
cat "$here/tables.sql" > program.sql
for q in 5 7 8 12 16 19 22; do
  grep -v '^--' "$queries/q$q.sql" >> program.sql
  echo ';' >> program.sql
done
cat "$here/compare-views.sql" >> program.sql
args=()
for s in 0 1 2 3 4 5; do
  args+=(--input "person=person-$s.csv" --input "auction=auction-$s.csv" --input "bid=bid-$s.csv")
done
"$eddy" run program.sql "${args[@]}" --format csv > eddy.out
python3 "$here/compare.py" eddy.out
