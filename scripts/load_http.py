"""Load test of `palisade serve --http` with native clients (a script, not a timed test: it
reports, never asserts).

Side by side in one run, each figure from palisade's own Rust clients (`bench-http` over
HTTP/1.1 keep-alive, `bench-client` over stdio), interleaved over ROUNDS rounds:
  - one principal, one connection, sequential `fs__stat` calls through the HTTP front;
  - the same calls over stdio through `palisade serve` (the stdio front);
  - `stat` on the fs-server directly (no palisade in between);
then PRINCIPALS principals at once, each with its own token and so its own sandboxed
fs-server, one connection each (at most 200: maxPrincipals' default), first as fast as they
can (a closed loop: saturation throughput, latency mostly queueing), then paced (each
principal one call per second, then per 400 ms); then memory: the gateway's RSS with no principal and with
every principal idle (their sessions closed, their servers still up until idleTimeout), and
the whole process tree's.

Usage (from scripts/load-http.sh): load_http.py PALISADE PRINCIPALS CALLS [ROUNDS]
"""

import hashlib
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time

from serve_http import start_on_any_port


# Paced runs: each principal calls once per this many milliseconds.
PACED_INTERVALS_MS = (1000, 400)


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main(palisade, principals, calls, rounds):
    work = tempfile.mkdtemp(prefix="palisade-load-")
    target = os.path.join(work, "sandbox")
    config = os.path.join(work, "servers.json")
    with open(config, "w") as f:
        json.dump({"mcpServers": {"fs": {"command": palisade, "args": ["fs-server"]}},
                   "palisade": {"sandboxDir": target}}, f)
    tokens = {f"p{i}": secrets.token_hex(16) for i in range(principals)}
    hashed, clear = os.path.join(work, "tokens"), os.path.join(work, "clear-tokens")
    for path, line in ((hashed, lambda t: hashlib.sha256(t.encode()).hexdigest()),
                       (clear, lambda t: t)):
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            for p, t in tokens.items():
                f.write(f"{p} {line(t)}\n")
    proc, port = start_on_any_port([palisade, "serve", "--config", config, "--tokens", hashed],
                                   os.path.join(work, "serve.log"))
    url = f"http://127.0.0.1:{port}/mcp"
    http_args = json.dumps({"path": os.path.join(target, "principals", "{principal}")})
    bench_http = [palisade, "bench-http", "--url", url, "--tokens", clear, "--tool", "fs__stat",
                  "--args", http_args]
    stdio_args = json.dumps({"path": target})
    one = {"http": [], "stdio": [], "direct": []}
    try:
        time.sleep(0.5)
        rss_none = rss_kb(proc.pid)
        for _ in range(rounds):
            one["http"].append(run_json(bench_http + [
                "--principals", "1", "--calls", str(calls), "--warmup", "50"]))
            one["stdio"].append(run_json([
                palisade, "bench-client", "--calls", str(calls), "--warmup", "50",
                "--tool", "fs__stat", "--args", stdio_args, "--",
                palisade, "serve", "--config", config]))
            one["direct"].append(run_json([
                palisade, "bench-client", "--calls", str(calls), "--warmup", "50",
                "--tool", "stat", "--args", stdio_args, "--",
                palisade, "fs-server", "--root", target]))
        many = run_json(bench_http + ["--calls", str(calls), "--warmup", "5"])
        # Paced: every principal active at a steady rate (one call per INTERVAL each), under
        # the saturation throughput above, so that latency is not a queue of the closed loop.
        paced = {ms: run_json(bench_http + ["--calls", str(max(20, calls // 2)), "--warmup", "2",
                                            "--interval-ms", str(ms)])
                 for ms in PACED_INTERVALS_MS}
        time.sleep(1)
        rss_idle = rss_kb(proc.pid)
        pids = tree(proc.pid)
        tree_idle = sum(rss_kb(p) for p in pids)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    subprocess.run(["rm", "-rf", work], check=False)

    def med(kind, key):
        return statistics.median(r["latencyUs"][key] for r in one[kind])

    errors = sum(r["errors"] + r["toolErrors"] for k in one for r in one[k])
    report = {
        "rounds": rounds, "calls": calls, "principals": principals,
        "one_principal_us": {k: {"p50": med(k, "median"), "p99": med(k, "p99")} for k in one},
        "http_over_stdio_p50_us": round(med("http", "median") - med("stdio", "median"), 1),
        "stdio_over_direct_p50_us": round(med("stdio", "median") - med("direct", "median"), 1),
        "all_principals": {
            "ready": many["principalsReady"], "p50_us": many["latencyUs"]["median"],
            "p99_us": many["latencyUs"]["p99"], "max_us": many["latencyUs"]["max"],
            "calls_per_second": many["throughputPerSec"],
            "ok": many["ok"], "errors": many["errors"] + many["toolErrors"],
            "init_failures": many["initFailures"], "first_errors":
                many["firstErrors"] + many["initErrors"],
            "session_setup_ms": many["sessionSetupMs"],
        },
        "paced": {f"every_{ms}ms": {
            "calls_per_second_offered": round(principals * 1000 / ms),
            "calls_per_second": r["throughputPerSec"], "ready": r["principalsReady"],
            "p50_us": r["latencyUs"]["median"], "p99_us": r["latencyUs"]["p99"],
            "max_us": r["latencyUs"]["max"],
            "p99_added_over_direct_p99_us": round(r["latencyUs"]["p99"] - med("direct", "p99"), 1),
            "ok": r["ok"], "errors": r["errors"] + r["toolErrors"] + r["initFailures"],
        } for ms, r in paced.items()},
        "errors_one_principal": errors,
        "memory": {
            "gateway_rss_no_principal_kb": rss_none, "gateway_rss_all_idle_kb": rss_idle,
            "gateway_kb_per_idle_principal": round((rss_idle - rss_none) / principals, 1),
            "tree_rss_all_idle_kb": tree_idle, "tree_processes": len(pids),
            "tree_kb_per_idle_principal": round((tree_idle - rss_none) / principals, 1),
        },
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
         int(sys.argv[4]) if len(sys.argv) > 4 else 3)
