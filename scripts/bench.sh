#!/usr/bin/env bash
# One reproducible benchmark: Palisade against running directly, bare bubblewrap and srt,
# side by side and interleaved (launch, per-call latency and throughput, memory, scaling with
# servers, policy rules, roots and message size, the egress proxy). Writes
# target/bench/results.json and regenerates the marked part of docs/benchmarks.md plus
# docs/bench/*.svg. The measuring is in scripts/bench.py, the page in scripts/bench_report.py.
#
# Usage: scripts/bench.sh [--quick]
#   --quick: a few samples of everything (under two minutes once built): checks the harness
#            works; its figures are not worth quoting, so its page goes to
#            target/bench/benchmarks.md and docs/ is left alone.
# Test dependencies (srt, server-filesystem) come from $PALISADE_TEST_DEPS when set, else
# scripts/install-test-deps.sh installs them under target/test-deps (idempotent).
# The package runner rows (a cached `npx -y` start; the first fetch beside `npm install`)
# fetch @modelcontextprotocol/server-memory, at the version the test dependencies hold, from the
# npm registry as configured on the machine: 2 fetches with --quick, 6 without. Without a
# registry those rows are left out with the reason; the cached starts never reach it.
# PALISADE_BEFORE=/path/to/an/older/palisade adds that binary's launch rows to the `true`
# table, measured in the same rounds (before/after comparisons, docs/benchmarks.md).
# A benchmark, not a test: nothing here asserts a time.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
quick=0
case "${1:-}" in
  --quick) quick=1 ;;
  "") ;;
  *) echo "usage: scripts/bench.sh [--quick]" >&2; exit 2 ;;
esac

log() { printf '== %s\n' "$*" >&2; }

if [ -n "${PALISADE_TEST_DEPS:-}" ] && [ -d "$PALISADE_TEST_DEPS/node_modules" ]; then
  deps=$PALISADE_TEST_DEPS
else
  log "installing test dependencies"
  scripts/install-test-deps.sh
  deps="$root/target/test-deps"
fi

log "building release binaries and benches"
# The benches first: their build's palisade (profile `bench`) lands in target/release too, and
# the release build after it puts the release binary back there, the one users run and the
# one build.rs orders (its symbol names differ under the `bench` profile).
cargo bench --quiet --no-run --bench scaling --bench egress 2>/dev/null
cargo build --release --quiet

# srt leaves /tmp/srt-mux-*.sock behind; note what exists now to remove what it adds.
before=$(ls /tmp | grep '^srt-' || true)
cleanup() {
  after=$(ls /tmp | grep '^srt-' || true)
  comm -13 <(echo "$before" | sort) <(echo "$after" | sort) | grep . |
    while read -r f; do rm -f "/tmp/$f"; done || true
}
trap cleanup EXIT

ROOT="$root" PALISADE="$root/target/release/palisade" DEPS="$deps" QUICK="$quick" \
  CMDLINE="scripts/bench.sh$([ "$quick" = 1 ] && echo ' --quick')" \
  PYTHONPATH="$root/scripts" PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 scripts/bench.py
