#!/usr/bin/env python3
"""Palisade binaries side by side (two, or more), interleaved, against the fs-server run directly:
per-call latency and throughput through `palisade serve` (fs-server `stat`, 1 and 16 callers;
a 1 MiB `read`). For before/after figures of a change to the gateway's call path.

Usage (from the repository root, both binaries built with --release):
    python3 scripts/compare_binaries.py [--audit-log] OLD_BINARY [NEW_BINARY [MORE...]]
NEW_BINARY defaults to target/release/palisade, whose bench-client drives every run. MORE
are further gateways (binaries, or wrapper scripts that exec one with some setting) in the
same interleaving, each labelled by its file name. `--audit-log` gives every gateway an
anchored audit file (`auditLog`) instead of records on stderr.
A benchmark, not a test: it prints medians over 5 interleaved repetitions and asserts nothing.

Besides latency and throughput it prints CPU time per call (user + system, warm-up calls
included) of the command bench-client talks to, as a waiting wrapper reaps it: for `direct`
the fs-server's own; for `old`/`new` the gateway's own, since serve's sandboxed fs-server is
killed at exit and its time is never added to serve's. So `new` against `old` compares the
gateway's CPU per call. On a shared machine CPU time is the steadier figure: other load
stretches wall time but hardly the CPU a call costs. `floor` is the server behind `socat`, a
relay that reads nothing: what two more pipe hops and wake-ups cost on this machine (its CPU
figure includes the server's, as for `direct`).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from gateway_rss import write_data

ARGS = [a for a in sys.argv[1:] if a != "--audit-log"]
AUDIT_LOG = "--audit-log" in sys.argv[1:]
if not ARGS:
    raise SystemExit(__doc__)
OLD = os.path.abspath(ARGS[0])
NEW = os.path.abspath(ARGS[1] if len(ARGS) > 1 else "target/release/palisade")
MORE = [os.path.abspath(a) for a in ARGS[2:]]
ALLOW = os.path.abspath("tests/fixtures/allow-all-policy.json")


def main():
    d = os.path.abspath(tempfile.mkdtemp(prefix="compare-", dir="target"))
    try:
        data = write_data(d)

        def serve(binary, name):
            path = os.path.join(d, name + ".json")
            with open(path, "w") as f:
                # One fs-server binary behind every gateway (NEW's, as for `direct`): only the
                # gateway differs between `old` and `new`. Two builds of unchanged fs-server
                # code were measured 0.5 ms apart on a 1 MiB read (code layout), which a
                # per-gateway server counted as the gateway's.
                json.dump({"mcpServers": {"fs0": {
                    "command": NEW, "args": ["fs-server", "--root", data],
                    "sandbox": {"filesystem": {"allowRead": [data]}}}},
                    "palisade": dict(
                        {"sandboxPolicy": "warn", "policy": ALLOW,
                         "sandboxDir": os.path.join(d, "sandbox-" + name)},
                        **({"auditLog": os.path.join(d, name + "-audit.jsonl")}
                           if AUDIT_LOG else {}))}, f)
            return [binary, "serve", "--config", path]

        direct = [NEW, "fs-server", "--root", data]
        variants = {"direct": (direct, "")}
        # A relay that moves bytes and reads none: the floor of any out-of-process gateway.
        if shutil.which("socat"):
            variants["floor"] = ([shutil.which("socat"), "-b", str(1 << 20), "-",
                                  "EXEC:" + " ".join(direct)], "")
        variants.update({"old": (serve(OLD, "old"), "fs0__"), "new": (serve(NEW, "new"), "fs0__")})
        for n, more in enumerate(MORE):
            # Labelled by file name; one already taken gets its position added.
            label = os.path.basename(more)
            if label in variants:
                label = "%s-%d" % (label, n + 3)
            variants[label] = (serve(more, "more%d" % n), "fs0__")

        cpu_file = os.path.join(d, "cpu")
        # Runs the command and, once it has exited, writes the CPU seconds of everything
        # reaped below it (serve reaps its servers before it exits).
        wrapper = ("import resource, subprocess, sys; subprocess.run(sys.argv[2:]); "
                   "r = resource.getrusage(resource.RUSAGE_CHILDREN); "
                   "open(sys.argv[1], 'w').write(str(r.ru_utime + r.ru_stime))")

        def run(cmd, tool, args, calls, conc, warm):
            r = subprocess.run([NEW, "bench-client", "--calls", str(calls), "--concurrency",
                                str(conc), "--warmup", str(warm), "--tool", tool,
                                "--args", json.dumps(args), "--",
                                sys.executable, "-c", wrapper, cpu_file] + cmd,
                               capture_output=True, text=True)
            if r.returncode:
                raise SystemExit(r.stderr[-800:])
            out = json.loads(r.stdout)
            if out["ok"] != calls:
                raise SystemExit("only %d of %d calls ok" % (out["ok"], calls))
            with open(cpu_file) as f:
                out["cpuUsPerCall"] = float(f.read()) * 1e6 / (calls + warm)
            return out

        def series(label, tool, args, calls, conc, warm=50, reps=5):
            runs = {k: [] for k in variants}
            for _ in range(reps):
                for k, (cmd, prefix) in variants.items():
                    runs[k].append(run(cmd, prefix + tool, args, calls, conc, warm))
            print("==", label)
            width = max(6, *(len(k) for k in runs))
            for k, v in runs.items():
                med = statistics.median(r["latencyUs"]["median"] for r in v)
                p99 = statistics.median(r["latencyUs"]["p99"] for r in v)
                thr = statistics.median(r["throughputPerSec"] for r in v)
                cpu = statistics.median(r["cpuUsPerCall"] for r in v)
                print("  %-*s median %8.1f us  p99 %8.1f us  throughput %7.0f/s  CPU %7.1f us/call"
                      % (width, k, med, p99, thr, cpu))

        small = {"path": os.path.join(data, "f.txt")}
        series("stat, 1 caller", "stat", small, 2000, 1)
        series("stat, 16 callers", "stat", small, 4000, 16)
        series("read 1 MiB, 1 caller", "read",
               {"path": os.path.join(data, "big.txt"), "maxBytes": 1 << 20}, 100, 1, warm=3)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
