#!/usr/bin/env bash
# Installs what the end-to-end tests use besides Rust, under ~/.cache/eddy
# (override with EDDY_CACHE): the tansu Kafka-protocol broker (from
# crates.io), Feldera's Python client (from PyPI) in a virtual environment,
# Schemathesis (from PyPI) in another, and psycopg (from PyPI) in a third;
# and Debian's postgresql-client (psql) when it is missing. All are pinned
# (psql is Debian's); a second run finds them and does nothing.
set -euo pipefail
cache="${EDDY_CACHE:-$HOME/.cache/eddy}"
mkdir -p "$cache"

TANSU_VERSION=0.6.0
FELDERA_VERSION=0.369.0
SCHEMATHESIS_VERSION=4.32.5
PSYCOPG_VERSION=3.3.9

if [ ! -x "$cache/tansu/bin/tansu" ]; then
    echo "installing tansu $TANSU_VERSION into $cache/tansu"
    cargo install tansu --version "$TANSU_VERSION" --locked --features dynostore \
        --root "$cache/tansu"
fi

if ! "$cache/venv/bin/python" -c "import feldera" 2>/dev/null; then
    echo "installing the feldera Python client $FELDERA_VERSION into $cache/venv"
    python3 -m venv "$cache/venv"
    "$cache/venv/bin/pip" install --quiet "feldera==$FELDERA_VERSION"
fi

if ! "$cache/st-venv/bin/st" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
    echo "installing schemathesis $SCHEMATHESIS_VERSION into $cache/st-venv"
    python3 -m venv "$cache/st-venv"
    "$cache/st-venv/bin/pip" install --quiet "schemathesis==$SCHEMATHESIS_VERSION"
fi

if ! "$cache/pg-venv/bin/python" -c "import psycopg; assert psycopg.__version__ == '$PSYCOPG_VERSION'" 2>/dev/null; then
    echo "installing psycopg $PSYCOPG_VERSION into $cache/pg-venv"
    python3 -m venv "$cache/pg-venv"
    "$cache/pg-venv/bin/pip" install --quiet "psycopg[binary]==$PSYCOPG_VERSION"
fi

if ! command -v psql >/dev/null; then
    echo "installing Debian's postgresql-client (psql)"
    sudo_=""
    [ "$(id -u)" -ne 0 ] && sudo_=sudo
    $sudo_ apt-get update && $sudo_ apt-get install -y postgresql-client
fi
