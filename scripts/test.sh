#!/usr/bin/env bash
# Installs what the test suite needs (when missing) and runs all of it.
# Usage: scripts/test.sh [extra cargo test args...]
# On a fresh Debian machine with Rust this is the only command needed; it is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '\n== %s\n' "$*" >&2; }

scripts/install-test-deps.sh
export PALISADE_TEST_DEPS="$PWD/target/test-deps"
# Everything a test needs is installed now: a test that finds a prerequisite missing fails
# instead of skipping (tests/support/skip.rs), so CI cannot pass on skipped tests.
export PALISADE_TEST_STRICT=1

log "cargo fmt --check"
cargo fmt --all -- --check
log "cargo clippy"
cargo clippy --all-targets --quiet -- -D warnings
log "cargo test"
cargo test --all-targets --no-fail-fast "$@"

# The benchmark harness must keep working; --quick checks it runs end to end and writes its
# results (under target/bench), and asserts no timing.
log "bench smoke (scripts/bench.sh --quick)"
scripts/bench.sh --quick >/dev/null

# Each cargo-fuzz target for a short time (FUZZ_SECONDS, default 20); fails on a crash.
log "fuzz (scripts/fuzz.sh)"
scripts/fuzz.sh
