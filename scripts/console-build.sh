#!/usr/bin/env bash
# Builds the web console from console/ into crates/eddy-server/console/, the
# bundle that `cargo build` compiles into the server: `npm ci` installs the
# exact packages of console/package-lock.json, then esbuild bundles them.
# Node is needed only here, never to build or run Eddy.
#
#   scripts/console-build.sh           rebuild the committed bundle
#   scripts/console-build.sh --check   fail if the committed bundle is not
#                                      what the sources build to (CI)
set -euo pipefail
cd "$(dirname "$0")/../console"
npm ci --no-audit --no-fund --loglevel=error
if [ "${1:-}" = "--check" ]; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
    node build.mjs --out "$out"
    if ! diff -r "$out" ../crates/eddy-server/console >/dev/null; then
        diff -rq "$out" ../crates/eddy-server/console || true
        echo "crates/eddy-server/console/ is not what console/ builds to: run scripts/console-build.sh and commit it" >&2
        exit 1
    fi
    echo "the committed console bundle matches its sources"
else
    node build.mjs
fi
