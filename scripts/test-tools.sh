#!/usr/bin/env bash
# Installs what the end-to-end tests use besides Rust, under ~/.cache/eddy
# (override with EDDY_CACHE): the tansu Kafka-protocol broker (from
# crates.io), Feldera's Python client (from PyPI) in a virtual environment,
# and Schemathesis (from PyPI) in another. All are pinned; a second run
# finds them and does nothing.
set -euo pipefail
cache="${EDDY_CACHE:-$HOME/.cache/eddy}"
mkdir -p "$cache"

TANSU_VERSION=0.6.0
FELDERA_VERSION=0.369.0
SCHEMATHESIS_VERSION=4.32.5

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
