#!/usr/bin/env bash
# Builds the cargo-fuzz targets in fuzz/ and runs each for a short time, printing its run
# time and executions. Exits non-zero when a target crashes (a panic is an invariant
# violation, see fuzz/checks/); the crashing input is kept in target/fuzz-artifacts/<target>/
# and should be fixed, then copied to fuzz/regressions/<target>/ (tests/fuzz_corpus.rs
# replays it in every `cargo test`).
#
# Usage: scripts/fuzz.sh [target...]        (default: every target)
# Env:   FUZZ_SECONDS   seconds per target (default 20)
#        FUZZ_MERGE=1   afterwards, merge what the run found into fuzz/corpus/ (minimised)
#        FUZZ_OPTIONAL=1  skip (exit 0, with a message) instead of failing when cargo-fuzz
#                         is missing or cannot build the targets on this machine
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
seconds=${FUZZ_SECONDS:-20}
log() { printf '\n== %s\n' "$*" >&2; }

cargo_fuzz="$root/target/test-deps/cargo-bin/bin/cargo-fuzz"
if [ ! -x "$cargo_fuzz" ]; then
  cargo_fuzz=$(command -v cargo-fuzz || true)
fi
if [ -z "$cargo_fuzz" ]; then
  msg="cargo-fuzz is not installed (scripts/install-test-deps.sh installs it)"
  if [ "${FUZZ_OPTIONAL:-0}" = 1 ]; then log "SKIPPING fuzzing: $msg"; exit 0; fi
  echo "$msg" >&2
  exit 1
fi
export PATH="$(dirname "$cargo_fuzz"):$PATH"

# Without a sanitizer, cargo-fuzz passes only stable flags (-Cpasses=sancov-module, the
# sanitizer-coverage llvm-args, --cfg fuzzing): stable Rust builds the targets (checked with
# cargo-fuzz 0.13.2 and Rust 1.95). A nightly toolchain is used when rustup has one, as
# cargo-fuzz expects by default.
toolchain=()
if command -v rustup >/dev/null && rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  toolchain=(+nightly)
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(file_uri root_guard policy_load domain_match bwrap_argv jsonrpc_framing upstream_frame connect_verdict)
fi

# Release build with debug assertions (overflow checks). No sanitizer: the code under test
# is safe Rust, so the fuzzers look for panics (violated invariants); ASan would only slow
# the build and the runs.
build=(-O -a --sanitizer none)
log "building fuzz targets (cargo ${toolchain[*]} fuzz build ${build[*]})"
start=$(date +%s)
build_log="$root/target/fuzz-build.log"
mkdir -p "$root/target"
if ! (cd fuzz && cargo "${toolchain[@]}" fuzz build "${build[@]}") >"$build_log" 2>&1; then
  tail -n 30 "$build_log" >&2
  msg="cargo-fuzz could not build the targets (log: $build_log)"
  if [ "${FUZZ_OPTIONAL:-0}" = 1 ]; then log "SKIPPING fuzzing: $msg"; exit 0; fi
  echo "$msg" >&2
  exit 1
fi
log "built in $(($(date +%s) - start)) s"

scratch="$root/target/fuzz-scratch"
export PALISADE_FUZZ_SCRATCH="$scratch"
trap 'rm -rf "$scratch"' EXIT
bin_dir="$root/fuzz/target/x86_64-unknown-linux-gnu/release"
failed=()
printf '\n%-16s %8s %12s %10s %8s  %s\n' target seconds execs execs/s corpus result
for t in "${targets[@]}"; do
  work="$root/target/fuzz-corpus/$t"
  artifacts="$root/target/fuzz-artifacts/$t"
  mkdir -p "$work" "$artifacts" "$scratch"
  out="$root/target/fuzz-$t.log"
  set +e
  # The committed corpus is read (second directory); new inputs go to the work directory.
  "$bin_dir/$t" "$work" "fuzz/corpus/$t" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" >"$out" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out" | tail -1)
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$out" | tail -1)
  corpus=$(sed -n 's/.*\bcorp: \([0-9]*\)\/.*/\1/p' "$out" | tail -1)
  if [ "$rc" -eq 0 ]; then
    result=ok
  else
    result="CRASH (exit $rc): $(ls -t "$artifacts" | head -1 | sed "s|^|$artifacts/|")"
    failed+=("$t")
  fi
  rate=$([ -n "$execs" ] && [ -n "$secs" ] && [ "$secs" -gt 0 ] && echo $((execs / secs)) || echo -)
  printf '%-16s %8s %12s %10s %8s  %s\n' "$t" "${secs:-?}" "${execs:-?}" "$rate" "${corpus:-?}" "$result"
  if [ "${FUZZ_MERGE:-0}" = 1 ] && [ "$rc" -eq 0 ]; then
    "$bin_dir/$t" -merge=1 "fuzz/corpus/$t" "$work" >/dev/null 2>&1
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  log "fuzz targets crashed: ${failed[*]} (logs: target/fuzz-<target>.log)"
  for t in "${failed[@]}"; do
    grep -h -A3 "panicked at" "$root/target/fuzz-$t.log" | head -8 >&2 || true
  done
  exit 1
fi
