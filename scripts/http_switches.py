"""Context switches and CPU time per HTTP call (a script, not a timed test): one principal's
sequential `fs__stat` calls through `palisade serve --http`, with the gateway's (and its
server tree's) counts read from /proc before and after.

Usage: http_switches.py PALISADE CALLS
"""
import hashlib, json, os, secrets, subprocess, sys, tempfile, time, shutil
from serve_http import start_on_any_port

def tree(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop(); out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError: pass
    return out

def cs(pids):
    v = n = 0
    for p in pids:
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                for line in open(f"/proc/{p}/task/{t}/status"):
                    if line.startswith("voluntary_ctxt_switches"): v += int(line.split()[1])
                    if line.startswith("nonvoluntary_ctxt_switches"): n += int(line.split()[1])
        except OSError: pass
    return v, n

def cpu(pids):
    t = 0
    for p in pids:
        try:
            f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            t += int(f[11]) + int(f[12])
        except OSError: pass
    return t * 1e6 / os.sysconf("SC_CLK_TCK")

P, N = sys.argv[1], int(sys.argv[2])
work = tempfile.mkdtemp(prefix="palisade-cs-")
target = os.path.join(work, "sandbox")
config = os.path.join(work, "servers.json")
json.dump({"mcpServers": {"fs": {"command": P, "args": ["fs-server"]}}, "palisade": {"sandboxDir": target}}, open(config, "w"))
tok = secrets.token_hex(16)
for path, line in ((os.path.join(work, "h"), hashlib.sha256(tok.encode()).hexdigest()), (os.path.join(work, "c"), tok)):
    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f: f.write(f"p0 {line}\n")
proc, port = start_on_any_port([P, "serve", "--config", config, "--tokens", os.path.join(work, "h")], os.path.join(work, "serve.log"))
time.sleep(1.5)
bh = [P, "bench-http", "--url", f"http://127.0.0.1:{port}/mcp", "--tokens", os.path.join(work, "c"), "--tool", "fs__stat", "--args", json.dumps({"path": os.path.join(target, "principals", "{principal}")}), "--principals", "1", "--warmup", "5"]
subprocess.run(bh + ["--calls", "50"], capture_output=True, check=True)
pids = tree(proc.pid)
gw = [proc.pid]
a, ag, c0, g0 = cs(pids), cs(gw), cpu(pids), cpu(gw)
r = json.loads(subprocess.run(bh + ["--calls", str(N)], capture_output=True, check=True, text=True).stdout)
b, bg, c1, g1 = cs(pids), cs(gw), cpu(pids), cpu(gw)
calls = N + 5
print("http p50", r["latencyUs"]["median"], "| per call: cs tree vol %.1f invol %.1f; gateway-only vol %.1f invol %.1f; cpu tree %.0f us gateway %.0f us" % ((b[0]-a[0])/calls, (b[1]-a[1])/calls, (bg[0]-ag[0])/calls, (bg[1]-ag[1])/calls, (c1-c0)/calls, (g1-g0)/calls))
proc.terminate(); proc.wait()
shutil.rmtree(work)
