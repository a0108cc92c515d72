#!/usr/bin/env bash
# Scale-out, proven locally: R `palisade serve --http` replicas behind HAProxy (Debian's
# package) hashing on the Authorization header, M principals, one replica killed mid-run.
# Prints a per-principal table and p50/p99/failover figures; exits 1 when a property fails.
# Usage: scripts/scale-test.sh [REPLICAS (3)] [PRINCIPALS (12)] [SECONDS (8)]
# Env: PALISADE_BIN (skip `cargo build --release`), PALISADE_TEST_DEPS (Python venv with httpx)
set -euo pipefail
cd "$(dirname "$0")/.."
deps=${PALISADE_TEST_DEPS:-$PWD/target/test-deps}
[ -x "$deps/venv/bin/python" ] || scripts/install-test-deps.sh
if ! command -v haproxy >/dev/null; then
  [ "$(id -u)" -eq 0 ] || { echo "scale-test: haproxy missing (apt-get install haproxy)" >&2; exit 1; }
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null
fi
bin=${PALISADE_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release --quiet
  bin=$PWD/target/release/palisade
fi
"$deps/venv/bin/python" scripts/scale_test.py "$bin" "$(command -v haproxy)" \
  "${1:-3}" "${2:-12}" "${3:-8}"
