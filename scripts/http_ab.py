"""Two builds' HTTP fronts side by side, interleaved (a script, not a timed test: it reports,
never asserts): both serve at once, each round runs one principal's sequential `fs__stat`
calls through OLD's front, then NEW's, then through NEW's stdio front and to the fs-server
directly. Prints the median of the rounds' p50 and p99 per path, and HTTP over stdio.

Usage: http_ab.py OLD NEW CALLS ROUNDS (paths of two palisade binaries)
"""
import hashlib, json, os, secrets, statistics, subprocess, sys, tempfile, time, shutil
from serve_http import start_on_any_port
OLD, NEW, N, R = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
work = tempfile.mkdtemp(prefix="palisade-ab-")
target = os.path.join(work, "sandbox")
config = os.path.join(work, "servers.json")
json.dump({"mcpServers": {"fs": {"command": NEW, "args": ["fs-server"]}}, "palisade": {"sandboxDir": target}}, open(config, "w"))
tok = secrets.token_hex(16)
for path, line in ((os.path.join(work, "h"), hashlib.sha256(tok.encode()).hexdigest()), (os.path.join(work, "c"), tok)):
    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f: f.write(f"p0 {line}\n")
procs, urls = [], {}
for name, b in (("old", OLD), ("new", NEW)):
    proc, port = start_on_any_port([b, "serve", "--config", config, "--tokens", os.path.join(work, "h")], os.path.join(work, name + ".log"))
    procs.append(proc)
    urls[name] = (b, f"http://127.0.0.1:{port}/mcp")
time.sleep(2)
res = {"http_old": [], "http_new": [], "stdio_new": [], "direct": []}
def run(cmd):
    return json.loads(subprocess.run(cmd, capture_output=True, check=True, text=True).stdout)["latencyUs"]
args = json.dumps({"path": os.path.join(target, "principals", "{principal}")})
try:
    for _ in range(R):
        for name in ("old", "new"):
            b, url = urls[name]
            res[f"http_{name}"].append(run([b, "bench-http", "--url", url, "--tokens", os.path.join(work, "c"), "--tool", "fs__stat", "--args", args, "--principals", "1", "--calls", str(N), "--warmup", "50"]))
        res["stdio_new"].append(run([NEW, "bench-client", "--calls", str(N), "--warmup", "50", "--tool", "fs__stat", "--args", json.dumps({"path": target}), "--", NEW, "serve", "--config", config]))
        res["direct"].append(run([NEW, "bench-client", "--calls", str(N), "--warmup", "50", "--tool", "stat", "--args", json.dumps({"path": target}), "--", NEW, "fs-server", "--root", target]))
finally:
    for p in procs: p.terminate(); p.wait()
    shutil.rmtree(work)
out = {k: {"p50": round(statistics.median(r["median"] for r in v), 1), "p99": round(statistics.median(r["p99"] for r in v), 1), "p50_rounds": [round(r["median"]) for r in v]} for k, v in res.items()}
out["old_http_over_stdio_p50"] = round(out["http_old"]["p50"] - out["stdio_new"]["p50"], 1)
out["new_http_over_stdio_p50"] = round(out["http_new"]["p50"] - out["stdio_new"]["p50"], 1)
print(json.dumps(out, indent=1))
