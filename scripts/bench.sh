#!/usr/bin/env bash
# Start-up cost of the sandbox: wall time of `palisade run -- true` against plain `true`, a
# bare bwrap with the same namespaces, and srt (Anthropic's sandbox-runtime) when it runs.
# Variants are interleaved round by round (so machine noise hits all alike); the median of
# many runs is reported. Writes target/bench/results.json and docs/benchmarks.md.
#
# Usage: scripts/bench.sh [--quick]        (--quick: 15 rounds instead of 101)
# A benchmark, not a test: nothing here asserts a time.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rounds=101
[ "${1:-}" = "--quick" ] && rounds=15

log() { printf '== %s\n' "$*" >&2; }

log "building release"
cargo build --release --quiet
palisade="$root/target/release/palisade"
deps="${PALISADE_TEST_DEPS:-$root/target/test-deps}"
srt="$deps/node_modules/.bin/srt"
out="$root/target/bench"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# srt needs a settings file; the equivalent of palisade's default: no network, no writes.
cat >"$work/srt.json" <<'EOF'
{"network": {"allowedDomains": [], "deniedDomains": []},
 "filesystem": {"denyRead": [], "allowWrite": [], "denyWrite": []}}
EOF

# srt leaves /tmp/srt-mux-*.sock behind; note what exists now to clean up what it adds.
before=$(ls /tmp | grep '^srt-' || true)

log "measuring ($rounds rounds, interleaved)"
PALISADE="$palisade" SRT="$srt" SRT_SETTINGS="$work/srt.json" ROUNDS="$rounds" \
  OUT="$out/results.json" /usr/bin/python3 - <<'EOF'
import json, os, shutil, statistics, subprocess, time

rounds = int(os.environ["ROUNDS"])
true = shutil.which("true") or "/usr/bin/true"
bwrap = shutil.which("bwrap")
variants = {
    "true": [true],
    "palisade run -- true": [os.environ["PALISADE"], "run", "--", "true"],
}
if bwrap:
    # The namespaces and mounts palisade uses, without its probing, closure and seccomp.
    variants["bwrap (bare, same namespaces)"] = [
        bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
        "--new-session", "--cap-drop", "ALL", "--proc", "/proc", "--dev", "/dev",
        "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib",
        "/lib", "--symlink", "usr/lib64", "/lib64", "--tmpfs", "/tmp", "--", "true"]
srt = os.environ["SRT"]
notes = {}
if os.path.exists(srt):
    cmd = [srt, "-s", os.environ["SRT_SETTINGS"], "-c", "true"]
    probe = subprocess.run(cmd, capture_output=True, text=True)
    if probe.returncode == 0:
        variants["srt -c true"] = cmd
    else:
        notes["srt"] = "did not run: exit %d: %s" % (probe.returncode, probe.stderr.strip()[:300])
else:
    notes["srt"] = "not installed at %s" % srt

env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"),
       "PALISADE_LOG_LEVEL": "warn"}
samples = {k: [] for k in variants}
for name, cmd in variants.items():  # warm-up, not recorded
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(rounds):
    for name, cmd in variants.items():
        t0 = time.perf_counter_ns()
        r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t1 = time.perf_counter_ns()
        if r.returncode != 0:
            raise SystemExit("%s failed with exit %d" % (name, r.returncode))
        samples[name].append((t1 - t0) / 1e6)

def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]

results = {}
base = statistics.median(samples["true"])
for name, xs in samples.items():
    results[name] = {
        "runs": len(xs),
        "median_ms": round(statistics.median(xs), 2),
        "p10_ms": round(q(xs, 0.10), 2),
        "p90_ms": round(q(xs, 0.90), 2),
        "min_ms": round(min(xs), 2),
        "overhead_over_true_ms": round(statistics.median(xs) - base, 2),
    }
with open(os.environ["OUT"], "w") as f:
    json.dump({"rounds": rounds, "results": results, "notes": notes}, f, indent=2)
    f.write("\n")
for name, r in results.items():
    print("%-34s median %8.2f ms  p10 %8.2f  p90 %8.2f  (+%.2f ms over true)" % (
        name, r["median_ms"], r["p10_ms"], r["p90_ms"], r["overhead_over_true_ms"]))
for k, v in notes.items():
    print("note: %s: %s" % (k, v))
EOF

after=$(ls /tmp | grep '^srt-' || true)
leaked=$(comm -13 <(echo "$before" | sort) <(echo "$after" | sort) | grep . || true)
if [ -n "$leaked" ]; then
  log "srt left $(echo "$leaked" | wc -l) file(s) in /tmp; removing them"
  echo "$leaked" | while read -r f; do rm -f "/tmp/$f"; done
fi

# docs/benchmarks.md: the figures, the exact command, the machine.
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //' || echo unknown)
python3_results=$(/usr/bin/python3 -c '
import json,sys
d=json.load(open(sys.argv[1]))
print("| variant | runs | median | min | p10 | p90 | median overhead over `true` |")
print("|---|---|---|---|---|---|---|")
for k,r in d["results"].items():
    print("| `%s` | %d | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %+.2f ms |" % (k, r["runs"], r["median_ms"], r["min_ms"], r["p10_ms"], r["p90_ms"], r["overhead_over_true_ms"]))
for k,v in d["notes"].items():
    print("\nNote (%s): %s" % (k, v))
' "$out/results.json")
cat >docs/benchmarks.md <<EOF
# Benchmarks

Generated by \`scripts/bench.sh$([ "$rounds" = 15 ] && echo ' --quick')\` on $(date -u +%Y-%m-%d). Re-run it to refresh this page;
raw numbers are in \`target/bench/results.json\`.

## Sandbox start-up: \`palisade run -- true\`

Wall time from spawn to exit of each command, measured by a Python harness with
\`time.perf_counter_ns\`, the variants interleaved round by round ($rounds rounds, one
unrecorded warm-up each). \`palisade run\` includes everything it does per start: argument
parsing, the quick capability probe (file reads and PATH lookups, no process), resolving the command and its
runtime closure, discovering the system base, compiling the seccomp filter, and the exec of
bwrap, which then builds the namespaces.

$python3_results

Target (issue 2): native sandbox overhead at most 10 ms median over plain \`true\`.
The bare bwrap line shows how much of the cost is bubblewrap itself (namespace creation,
mostly the network namespace) rather than palisade.

## Machine

- kernel: $(uname -sr), $(nproc) CPUs ($cpu)
- $(bwrap --version 2>/dev/null || echo 'bwrap: missing'), node $(node --version 2>/dev/null || echo missing)
- load average when the run ended: $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared with
  other jobs; under load all medians grow together, and \`min\` shows the unloaded floor)
EOF
log "wrote target/bench/results.json and docs/benchmarks.md"
