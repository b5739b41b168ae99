#!/usr/bin/env bash
# The whole SQLite sqllogictest corpus, incrementally: every query of every
# file becomes a maintained Eddy view. Fetches nothing: give it a checkout
# of https://github.com/gregrahn/sqllogictest (its `test/` folder is run) or
# any folder of .test files.
#
#   scripts/conformance-all.sh PATH [SUMMARY]
#
# Builds the workspace (release, in the same target folder as CI), runs eddy-slt with
# one job per core, and writes SUMMARY (default target-conformance.md):
# passed, failed, skipped by skipif/onlyif, the time, and the failures
# grouped by kind with the first place each happened. Each file's line goes
# to SUMMARY.log. Record a dated result in docs/conformance.md.
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,13p' "$0" >&2
  exit 2
fi
corpus="$(realpath "$1")"
[ -d "$corpus/test" ] && corpus="$corpus/test"
summary="$(realpath -m "${2:-target-conformance.md}")"
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${EDDY_CACHE:-$HOME/.cache/eddy}/target}"
# The whole workspace: the same feature set as `cargo test --release
# --workspace` (CI), so nothing is compiled twice.
cargo build --release --workspace
"$CARGO_TARGET_DIR/release/eddy-slt" --quiet --jobs "$(nproc)" --summary "$summary" \
  --differences sql-tests/sqlite-differences.txt "$corpus" \
  > "$summary.log"
tail -1 "$summary.log"
cat "$summary"
