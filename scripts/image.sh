#!/usr/bin/env bash
# Builds the Palisade runtime image on a machine with no image registry: a Debian bookworm root
# filesystem made by mmdebstrap from Debian's packages, imported into podman as the base, then
# deploy/Containerfile adds the release binary. Installs podman/mmdebstrap with apt when missing
# (as root) and moves the hugetlb cgroup controller off the v2 hierarchy when crun would refuse
# the hybrid layout (idempotent).
# Usage: scripts/image.sh [IMAGE (default localhost/palisade:latest)]
# Env: PALISADE_BIN=path (skip `cargo build --release`), IMAGE_KEEP_SHELL=1 (keep /bin/sh and
#      every program: an image to debug in, not the runtime image),
#      MIRROR=http://deb.debian.org/debian
set -euo pipefail
cd "$(dirname "$0")/.."
image=${1:-localhost/palisade:latest}
base=localhost/palisade-base:bookworm
log() { echo "== image: $*" >&2; }

need=()
command -v podman >/dev/null || need+=(podman)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "image: need ${need[*]} (install them, or run as root)" >&2; exit 1; }
  log "installing ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
scripts/podman-prep.sh

bin=${PALISADE_BIN:-}
if [ -z "$bin" ]; then
  log "cargo build --release"
  cargo build --release --quiet
  bin=$PWD/target/release/palisade
fi
[ -x "$bin" ] || { echo "image: no palisade binary at $bin" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/palisade-image.XXXXXX")
trap 'rm -rf "$work"' EXIT

# What the binary links beyond libc: libgcc_s (unwinding). Everything else is static.
# The hooks below remove what nothing run in the image needs (palisade, bwrap, socat and their
# libraries, per ldd): apt, perl, docs, locales, gconv, the libraries only apt/gpgv/systemd
# tools use, and the shells. The package database stays (status) for scanners.
# deploy/trim-rootfs.sh then keeps only the programs the image runs and the libraries they load.
trim="$PWD/deploy/trim-rootfs.sh \"\$1\""
strip_shell='rm -f "$1"/bin/sh "$1"/bin/bash "$1"/bin/dash "$1"/bin/rbash "$1"/usr/bin/sh "$1"/usr/bin/bash "$1"/usr/bin/dash "$1"/usr/bin/rbash'
[ -n "${IMAGE_KEEP_SHELL:-}" ] && strip_shell=true && trim=true
log "mmdebstrap bookworm (minbase + bubblewrap socat ca-certificates libgcc-s1)"
mmdebstrap --quiet --variant=minbase --mode=root --format=tar \
  --include=bubblewrap,socat,ca-certificates,libgcc-s1 \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --customize-hook='chroot "$1" groupadd --gid 10001 palisade' \
  --customize-hook='chroot "$1" useradd --uid 10001 --gid 10001 --home-dir /var/lib/palisade --create-home --shell /usr/sbin/nologin palisade' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/cache/debconf/*-old "$1"/var/log/* "$1"/usr/share/zoneinfo "$1"/usr/share/i18n "$1"/usr/share/common-licenses' \
  --customize-hook='rm -rf "$1"/usr/bin/apt* "$1"/usr/lib/apt "$1"/usr/lib/x86_64-linux-gnu/libapt* "$1"/usr/share/perl* "$1"/usr/bin/perl* "$1"/usr/lib/x86_64-linux-gnu/perl* "$1"/usr/lib/x86_64-linux-gnu/gconv "$1"/var/lib/dpkg/info/*.md5sums' \
  --customize-hook='cd "$1"/usr/lib/x86_64-linux-gnu && rm -f libperl.so* libgnutls.so* libstdc++.so* libdb-5.3.so libunistring.so* libgcrypt.so* libp11-kit.so* libsystemd.so* libsepol.so* libgmp.so* libext2fs.so* libhogweed.so* libnettle.so* libtasn1.so* libidn2.so*' \
  --customize-hook='rm -f "$1"/usr/bin/gpgv "$1"/usr/bin/tar "$1"/usr/bin/openssl "$1"/var/cache/debconf/templates.dat* "$1"/var/lib/dpkg/info/*.symbols' \
  --customize-hook="$trim" \
  --customize-hook="$strip_shell" \
  bookworm "$work/rootfs.tar" "${MIRROR:-http://deb.debian.org/debian}"
log "podman import -> $base"
podman import --quiet "$work/rootfs.tar" "$base" >/dev/null
cp deploy/Containerfile "$work/Containerfile"
cp "$bin" "$work/palisade"
strip "$work/palisade" 2>/dev/null || true
old=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
log "podman build -> $image"
podman build --quiet --pull=never -f "$work/Containerfile" -t "$image" "$work" >/dev/null
new=$(podman image inspect --format '{{.Id}}' "$image")
# The previous build of this tag, now untagged: removed, so rebuilds do not pile up.
[ -n "$old" ] && [ "$old" != "$new" ] && podman rmi "$old" >/dev/null 2>&1 || true
size=$(podman image inspect --format '{{.Size}}' "$image")
printf 'image %s: %s bytes (%s MB)\n' "$image" "$size" "$((size / 1000000))"
