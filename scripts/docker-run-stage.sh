#!/usr/bin/env bash
# The Docker image's run stage, tested without a Docker engine (none runs
# on these machines, and no image registry is reachable):
#
#   scripts/docker-run-stage.sh [BINARY]     (default target/release/eddy)
#
# 1. builds, once, a Debian bookworm minimal root filesystem with
#    debootstrap (what debian:bookworm-slim holds) under $EDDY_CACHE;
# 2. applies docker/Dockerfile's run-stage steps to it: the system user
#    `eddy` with home /data, the binary at /usr/local/bin/eddy;
# 3. checks with the root filesystem's own ldd that every shared library
#    the binary needs is there;
# 4. runs `eddy serve` inside it (chroot) as user eddy, and the image's
#    HEALTHCHECK command (`eddy health`), which must answer healthy.
#
# Needs root (debootstrap, chroot) and Debian's package mirror.
set -euo pipefail
cd "$(dirname "$0")/.."
binary="$(realpath "${1:-${CARGO_TARGET_DIR:-target}/release/eddy}")"
cache="${EDDY_CACHE:-$HOME/.cache/eddy}"
rootfs="$cache/bookworm-rootfs"
[ -x "$binary" ] || { echo "no binary at $binary (cargo build --release)" >&2; exit 1; }

if [ ! -x "$rootfs/bin/sh" ]; then
    if ! command -v debootstrap >/dev/null; then
        apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null
    fi
    echo "building a bookworm root filesystem in $rootfs"
    rm -rf "$rootfs.tmp"
    debootstrap --variant=minbase bookworm "$rootfs.tmp" http://deb.debian.org/debian >/dev/null
    mv "$rootfs.tmp" "$rootfs"
fi

# The Dockerfile's run stage.
if ! chroot "$rootfs" id eddy >/dev/null 2>&1; then
    chroot "$rootfs" useradd --system --home /data eddy
fi
rm -rf "$rootfs/data"
mkdir -p "$rootfs/data"
chroot "$rootfs" chown eddy /data
install -m 755 "$binary" "$rootfs/usr/local/bin/eddy"

missing="$(chroot "$rootfs" ldd /usr/local/bin/eddy | grep 'not found' || true)"
if [ -n "$missing" ]; then
    echo "shared libraries missing in the image:" >&2
    echo "$missing" >&2
    exit 1
fi
echo "shared libraries: all present"
chroot "$rootfs" ldd /usr/local/bin/eddy | sed 's/^/  /'

mounted=""
cleanup() {
    [ -n "${server:-}" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
    [ -n "$mounted" ] && umount "$rootfs/proc" || true
}
trap cleanup EXIT
if ! mountpoint -q "$rootfs/proc"; then
    mount -t proc proc "$rootfs/proc"
    mounted=1
fi

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
chroot --userspec=eddy:eddy "$rootfs" /usr/local/bin/eddy serve \
    --bind "127.0.0.1:$port" --data-dir /data &
server=$!
for _ in $(seq 100); do
    if chroot --userspec=eddy:eddy "$rootfs" /usr/local/bin/eddy health \
        --url "http://127.0.0.1:$port" --timeout-secs 2 2>/dev/null; then
        echo "health probe: ok (as user eddy, in the image's root filesystem)"
        exit 0
    fi
    kill -0 "$server" 2>/dev/null || { echo "eddy serve exited" >&2; exit 1; }
    sleep 0.2
done
echo "the health probe never answered healthy" >&2
exit 1
