#!/usr/bin/env bash
# Installs what the end-to-end tests use besides Rust, under ~/.cache/eddy
# (override with EDDY_CACHE): the tansu Kafka-protocol broker (from
# crates.io), Feldera's Python client (from PyPI) in a virtual environment
# (and the version of Feldera's SQL suite in another),
# Schemathesis (from PyPI) in another, psycopg (from PyPI) in a third,
# Selenium (from PyPI) in a fourth, moto's S3 server (from PyPI) in a
# fifth and PyIceberg with pyarrow (from PyPI, the Iceberg tables' writer)
# in a sixth; and Debian's postgresql-client (psql), openssl,
# chromium, chromium-driver, and nodejs with npm, when they are missing. All are pinned
# (Debian's packages are the release's); a second run finds them and does nothing.
set -euo pipefail
cache="${EDDY_CACHE:-$HOME/.cache/eddy}"
mkdir -p "$cache"

TANSU_VERSION=0.6.0
FELDERA_VERSION=0.369.0
SCHEMATHESIS_VERSION=4.32.5
PSYCOPG_VERSION=3.3.9
SELENIUM_VERSION=4.51.0
MOTO_VERSION=5.2.6
PYICEBERG_VERSION=0.12.0
PYARROW_VERSION=26.0.1

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

# Feldera's own SQL suite (scripts/feldera-suite.py) runs through the
# client of the suite's version, beside the newer one the tests above use.
FELDERA_SUITE_VERSION=0.337.0
if ! "$cache/feldera-suite-venv/bin/python" -c "import feldera, importlib.metadata as m; assert m.version('feldera') == '$FELDERA_SUITE_VERSION'" 2>/dev/null; then
    echo "installing the feldera Python client $FELDERA_SUITE_VERSION into $cache/feldera-suite-venv"
    python3 -m venv "$cache/feldera-suite-venv"
    "$cache/feldera-suite-venv/bin/pip" install --quiet "feldera==$FELDERA_SUITE_VERSION"
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

if ! "$cache/selenium-venv/bin/python" -c "import selenium; assert selenium.__version__ == '$SELENIUM_VERSION'" 2>/dev/null; then
    echo "installing selenium $SELENIUM_VERSION into $cache/selenium-venv"
    python3 -m venv "$cache/selenium-venv"
    "$cache/selenium-venv/bin/pip" install --quiet "selenium==$SELENIUM_VERSION"
fi

if ! "$cache/moto-venv/bin/python" -c "import moto; assert moto.__version__ == '$MOTO_VERSION'" 2>/dev/null; then
    echo "installing moto $MOTO_VERSION (its S3 server) into $cache/moto-venv"
    python3 -m venv "$cache/moto-venv"
    "$cache/moto-venv/bin/pip" install --quiet "moto[server]==$MOTO_VERSION"
fi

# PyIceberg with its SQL catalog (SQLite) and its Glue catalog (boto3,
# pointed at moto's server).
if ! "$cache/iceberg-venv/bin/python" -c "import pyiceberg, pyarrow, sqlalchemy, boto3; assert pyiceberg.__version__ == '$PYICEBERG_VERSION'" 2>/dev/null; then
    echo "installing PyIceberg $PYICEBERG_VERSION into $cache/iceberg-venv"
    python3 -m venv "$cache/iceberg-venv"
    "$cache/iceberg-venv/bin/pip" install --quiet "pyiceberg[sql-sqlite,glue]==$PYICEBERG_VERSION" "pyarrow==$PYARROW_VERSION"
fi

# From Debian: psql, PostgreSQL's and Redis's servers (the connector
# tests write to and read from them), the browser (with its driver) that
# the console's end-to-end test drives, and Node.
missing=()
command -v psql >/dev/null || missing+=(postgresql-client)
# The servers the connector tests write to and read from.
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql)
command -v redis-server >/dev/null || missing+=(redis-server)
# Certificates for the PostgreSQL TLS test.
command -v openssl >/dev/null || missing+=(openssl)
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
# Node and npm only check that the committed console bundle is what its
# sources build to (scripts/console-build.sh --check); Eddy never needs them.
command -v npm >/dev/null || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing Debian's ${missing[*]}"
    sudo_=""
    [ "$(id -u)" -ne 0 ] && sudo_=sudo
    $sudo_ apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${missing[@]}" >/dev/null
fi
