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
# The attack suites write their tables here; remove old ones so only this run's are shown.
tables=(target/tmp/attack-table.md target/tmp/serve-attack-table.md)
compat_report=target/tmp/compat-report.txt
# Tests that need a host feature this machine lacks (a cgroup) record themselves here.
host_skips=target/tmp/host-skips.txt
rm -f "${tables[@]}" "$compat_report" "$host_skips"
cargo test --all-targets --no-fail-fast "$@"

# libtest shows a passing test's output to no one: print the attack tables and their counts
# (each attack's unprotected control must succeed, and palisade must block it).
for t in "${tables[@]}"; do
  if [ ! -f "$t" ]; then
    [ $# -eq 0 ] && { echo "attack table $t was not written" >&2; exit 1; }
    continue
  fi
  log "attack table ($t)"
  cat "$t"
  # The serve table has one column per tier (bwrap, then landlock). A positive row (what
  # must keep working behind palisade) is counted apart: "reached" there is the pass.
  awk -F'|' 'FNR>2 && /^\|/ {
      if ($2 ~ /positive row/) { p++; if ($4 ~ /^ *reached, as it must/) pb++; next }
      n++; if ($3 ~ /^ *succeeds/) c++; if ($4 ~ /^ *blocked/) b++;
      if (NF > 5) { l++; if ($5 ~ /^ *blocked/) lb++; if ($5 ~ /beyond this tier/) lx++ } }
    END {printf "%d attacks: the control succeeded in %d/%d, palisade blocked %d/%d", n, c, n, b, n;
      if (l) printf "; under landlock %d/%d (%d beyond Landlock by design)", lb, l, lx;
      if (p) printf "; positive rows working behind palisade %d/%d", pb, p;
      printf "\n"}' "$t"
done
if [ -f "$host_skips" ]; then
  log "SKIPPED: tests that need a host feature this machine lacks (see palisade check)"
  cat "$host_skips"
else
  log "no test was skipped for a missing host feature"
fi
if [ -f "$compat_report" ]; then
  log "compatibility suite: real servers through palisade serve, per check"
  cat "$compat_report"
fi

# The benchmark harness must keep working; --quick checks it runs end to end and writes its
# results (under target/bench), and asserts no timing.
log "bench smoke (scripts/bench.sh --quick)"
scripts/bench.sh --quick >/dev/null

# The runtime image, built from Debian's packages, proven in an unprivileged container
# (default seccomp, non-root, caps dropped, read-only root); says SKIPPED and passes only where
# podman cannot run; it also runs the attack suite's serve table inside such a container. Then
# the scale-out test behind HAProxy. About 75 s together (plus ~2 min once per machine for the
# attack image's python3 base).
log "container (scripts/container-test.sh)"
REBUILD=1 PALISADE_BIN="$PWD/target/release/palisade" scripts/container-test.sh
log "scale-out (scripts/scale-test.sh)"
PALISADE_BIN="$PWD/target/release/palisade" scripts/scale-test.sh

# Each cargo-fuzz target for a short time (FUZZ_SECONDS, default 20); fails on a crash.
log "fuzz (scripts/fuzz.sh)"
scripts/fuzz.sh
