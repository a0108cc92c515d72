#!/usr/bin/env bash
# Builds the image the attack suite runs in (scripts/container-test.sh): every file of the
# runtime image, plus Debian's python3 and a shell, which the hostile MCP server (a Python
# program) and the suite's harness (it starts commands through /bin/sh) need. It is a test
# image, never shipped: the runtime image has neither. The palisade binary, bubblewrap, socat,
# the user and /etc are the runtime image's own, copied over a bookworm minbase+python3 root
# (localhost/palisade-attacks-base:bookworm, made with mmdebstrap once and kept: it holds
# nothing built from this repository).
# Usage: scripts/attack-image.sh [RUNTIME_IMAGE [ATTACK_IMAGE]]
# Env: REBUILD_BASE=1 (remake the python3 base), MIRROR as for scripts/image.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-localhost/palisade:latest}
image=${2:-localhost/palisade-attacks:latest}
base=localhost/palisade-attacks-base:bookworm
log() { echo "== attack-image: $*" >&2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/palisade-attack-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [ -n "${REBUILD_BASE:-}" ] || ! podman image exists "$base"; then
  if ! command -v mmdebstrap >/dev/null; then
    [ "$(id -u)" -eq 0 ] || { echo "attack-image: need mmdebstrap (install it, or run as root)" >&2; exit 1; }
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
  fi
  log "mmdebstrap bookworm (minbase + python3) -> $base"
  mmdebstrap --quiet --variant=minbase --mode=root --format=tar --include=python3 \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    bookworm "$work/rootfs.tar" "${MIRROR:-http://deb.debian.org/debian}"
  podman import --quiet "$work/rootfs.tar" "$base" >/dev/null
fi
# The harness finds the Python SDK as PALISADE_TEST_DEPS/venv/bin/python: a venv whose
# interpreter is Debian's python3; its site-packages are the host's test venv, bind-mounted
# read-only by container-test.sh (same Python minor version, 3.11).
mkdir -p "$work/ctx/opt/palisade-test/venv/bin"
printf 'home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11\n' \
  >"$work/ctx/opt/palisade-test/venv/pyvenv.cfg"
ln -s /usr/bin/python3 "$work/ctx/opt/palisade-test/venv/bin/python"
cat >"$work/Containerfile" <<CF
FROM $base
COPY --from=$runtime / /
COPY opt /opt
ENV HOME=/var/lib/palisade
WORKDIR /var/lib/palisade
USER 10001:10001
CF
old=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
log "podman build -> $image"
podman build --quiet --pull=never -f "$work/Containerfile" -t "$image" "$work/ctx" >/dev/null
new=$(podman image inspect --format '{{.Id}}' "$image")
[ -n "$old" ] && [ "$old" != "$new" ] && podman rmi "$old" >/dev/null 2>&1 || true
