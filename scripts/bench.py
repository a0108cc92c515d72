#!/usr/bin/env python3
"""Measurement driver of scripts/bench.sh (run that, not this: it builds and installs first).

Measures Palisade against running directly, bare bubblewrap and srt, interleaving the variants
round by round so machine drift hits every side alike, then writes target/bench/results.json,
the generated part of docs/benchmarks.md (between marker comments; everything else in that
file is left alone) and SVG charts under docs/bench/. It measures; it asserts no time.

Inputs come from the environment bench.sh sets: PALISADE, DEPS, QUICK, ROOT, CMDLINE.
"""
import json, os, platform, shutil, statistics, subprocess, sys, tempfile, time

ROOT = os.environ["ROOT"]
PALISADE = os.environ["PALISADE"]
DEPS = os.environ["DEPS"]
QUICK = os.environ.get("QUICK") == "1"
# PALISADE_BEFORE: another palisade binary whose launch rows are measured beside PALISADE's.
BEFORE = os.environ.get("PALISADE_BEFORE")
SRT = os.path.join(DEPS, "node_modules/.bin/srt")
SERVER_FS = os.path.join(DEPS, "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
# The package the `npx -y` rows fetch: the version the test dependencies hold, pinned, so the
# only registry traffic is the measured first fetches (the test suite fetches it too).
MEMORY_PKG = "@modelcontextprotocol/server-memory"
# npm and uv pointed here fail at once: a cached start that would fetch is an error, not traffic.
UNREACHABLE_NPM = "http://127.0.0.1:9/"
NPM_ENV = {"NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR", "HTTPS_PROXY", "https_proxy",
           "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"}
ALLOW_ALL = os.path.join(ROOT, "tests/fixtures/allow-all-policy.json")
NODE = shutil.which("node") or "node"
BWRAP = shutil.which("bwrap")
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"),
       "PALISADE_LOG_LEVEL": "warn", "RUST_LOG": "warn"}

# Sizes of each part: --quick only checks that the harness works.
CFG = {
    "launch_rounds": 5 if QUICK else 41,
    "fetch_rounds": 1 if QUICK else 3,
    "true_rounds": 15 if QUICK else 101,
    "call_reps": 1 if QUICK else 3,
    "calls": 300 if QUICK else 2000,
    "servers": [1, 5] if QUICK else [1, 5, 20, 50],
    "memory_servers": [1, 5] if QUICK else [1, 5, 20],
    "sizes": [1 << 10, 100 << 10] if QUICK else [1 << 10, 100 << 10, 1 << 20, 10 << 20],
}
INIT = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "palisade-bench", "version": "0"}}}) + "\n"
INITIALIZED = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n"


def log(msg):
    print("== " + msg, file=sys.stderr, flush=True)


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


def summary(xs, unit):
    return {"runs": len(xs), "median_" + unit: round(statistics.median(xs), 3),
            "min_" + unit: round(min(xs), 3), "p90_" + unit: round(q(xs, 0.9), 3)}


# --- process trees and memory ------------------------------------------------------------

def children_map():
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                s = f.read()
        except OSError:
            continue
        ppid = int(s[s.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree(pid):
    kids, out, todo = children_map(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def mem_kb(pid):
    """(name, RSS kB, PSS kB) of one process; zeros if it is gone."""
    try:
        with open("/proc/%d/comm" % pid) as f:
            name = f.read().strip()
        with open("/proc/%d/smaps_rollup" % pid) as f:
            vals = {l.split(":")[0]: int(l.split()[1]) for l in f if l.split()[-1] == "kB"}
        return name, vals.get("Rss", 0), vals.get("Pss", 0)
    except (OSError, ValueError, IndexError):
        return "?", 0, 0


def tree_mem(pid):
    """Memory of a process tree grouped by executable name: {name: [count, rss, pss]}."""
    groups = {}
    for p in tree(pid):
        name, rss, pss = mem_kb(p)
        g = groups.setdefault(name, [0, 0, 0])
        g[0] += 1
        g[1] += rss
        g[2] += pss
    return groups


# --- an MCP server held open over stdio ----------------------------------------------------

class Server:
    """Spawns CMD, completes the handshake; `ms` is spawn → initialize response."""

    def __init__(self, cmd, cwd=None, env=None):
        t0 = time.perf_counter_ns()
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, env=env or ENV, cwd=cwd, text=True,
                                  start_new_session=True)
        self.p.stdin.write(INIT)
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        self.ms = (time.perf_counter_ns() - t0) / 1e6
        if '"result"' not in line:
            self.close()
            raise RuntimeError("%s: no initialize result: %r" % (cmd[:4], line[:200]))
        self.p.stdin.write(INITIALIZED)
        self.p.stdin.flush()

    def close(self):
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            self.p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.p.terminate()
            try:
                self.p.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


# --- configurations under test -------------------------------------------------------------

class Setup:
    def __init__(self, work):
        self.work = work
        self.data = os.path.join(work, "data")
        os.makedirs(self.data)
        with open(os.path.join(self.data, "f.txt"), "w") as f:
            f.write("hello\n")
        for size in CFG["sizes"]:
            with open(os.path.join(self.data, "size-%d.txt" % size), "w") as f:
                f.write(("abcdefghijklmnopqrstuvwxyz0123456789" * (size // 36 + 1))[:size])
        self.srt_settings = os.path.join(work, "srt.json")
        with open(self.srt_settings, "w") as f:
            json.dump({"network": {"allowedDomains": [], "deniedDomains": []},
                       "filesystem": {"denyRead": [], "allowWrite": [self.data],
                                      "denyWrite": []}}, f)
        self.max_read = str(16 << 20)

    def fs_server(self):
        return [PALISADE, "fs-server", "--root", self.data, "--max-read-bytes", self.max_read]

    def server_filesystem(self):
        return [NODE, SERVER_FS, self.data]

    def run(self, cmd):
        return [PALISADE, "run", "--rw", self.data, "--"] + cmd

    def srt(self, cmd):
        return [SRT, "-s", self.srt_settings, "-c", " ".join(cmd)]

    def serve_config(self, servers, n=1, name="cfg", audit_log=False):
        """A `palisade serve` config with N copies of one server, allow-all policy; the audit
        records go to stderr, or with `audit_log` to an anchored audit file."""
        d = os.path.join(self.work, "%s-%d-%s" % (name, n, servers[0]))
        os.makedirs(d, exist_ok=True)
        cmd = self.fs_server() if servers == "fs" else self.server_filesystem()
        mcp = {"%s%d" % (servers, i): {
            "command": cmd[0], "args": cmd[1:],
            "sandbox": {"filesystem": {"allowWrite": [self.data]}}} for i in range(n)}
        cfg = {"mcpServers": mcp, "palisade": {
            "sandboxDir": os.path.join(d, "sandbox"), "policy": ALLOW_ALL,
            "startupTimeout": 120}}
        if audit_log:
            cfg["palisade"]["auditLog"] = os.path.join(d, "audit.jsonl")
        path = os.path.join(d, "config.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        return [PALISADE, "serve", "--config", path]


def srt_works(s):
    if not os.path.exists(SRT):
        return "not installed at %s" % SRT
    r = subprocess.run(s.srt(["true"]), capture_output=True, text=True, env=ENV)
    if r.returncode != 0:
        return "did not run: exit %d: %s" % (r.returncode, r.stderr.strip()[:300])
    return None


# --- launch --------------------------------------------------------------------------------

def bench_true(s, with_srt):
    true = shutil.which("true") or "/usr/bin/true"
    # The bwrap tier as before (auto would add its trial sandbox), and the Landlock tier.
    variants = {"true": [true],
                "palisade run -- true": [PALISADE, "run", "--backend", "bwrap", "--", "true"],
                "palisade run --backend landlock -- true":
                    [PALISADE, "run", "--backend", "landlock", "--", "true"]}
    if BWRAP:
        # The namespaces and mounts palisade uses, without its probing, closure and seccomp.
        variants["bwrap (bare, same namespaces)"] = [
            BWRAP, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
            "--new-session", "--cap-drop", "ALL", "--proc", "/proc", "--dev", "/dev",
            "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink",
            "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--tmpfs", "/tmp", "--",
            "true"]
    if with_srt:
        variants["srt -c true"] = s.srt(["true"])
    if BEFORE:
        # An older palisade binary, measured in the same rounds (see docs/benchmarks.md).
        variants["palisade run -- true (before)"] = [BEFORE, "run", "--backend", "bwrap",
                                                     "--", "true"]
        variants["palisade run --backend landlock -- true (before)"] = [
            BEFORE, "run", "--backend", "landlock", "--", "true"]
    samples = {k: [] for k in variants}
    for cmd in variants.values():
        subprocess.run(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(CFG["true_rounds"]):
        for name, cmd in variants.items():
            t0 = time.perf_counter_ns()
            r = subprocess.run(cmd, env=ENV, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
            samples[name].append((time.perf_counter_ns() - t0) / 1e6)
            if r.returncode != 0:
                raise SystemExit("%s failed with exit %d" % (name, r.returncode))
    return {k: summary(v, "ms") for k, v in samples.items()}


def bench_launch(s, with_srt):
    variants = {}
    for label, base in (("fs-server", s.fs_server), ("server-filesystem", s.server_filesystem)):
        key = "fs" if label == "fs-server" else "sfs"
        variants[(label, "direct")] = base()
        variants[(label, "palisade run")] = s.run(base())
        if with_srt:
            variants[(label, "srt")] = s.srt(base())
        variants[(label, "palisade serve")] = s.serve_config(key)
    samples = {k: [] for k in variants}
    for cmd in variants.values():  # warm-up (page cache, node's compile cache)
        Server(cmd).close()
    for _ in range(CFG["launch_rounds"]):
        for k, cmd in variants.items():
            srv = Server(cmd)
            samples[k].append(srv.ms)
            srv.close()
    out = {}
    for (label, how), xs in samples.items():
        out.setdefault(label, {})[how] = summary(xs, "ms")
    return out


# --- package runners: a cached `npx -y` start, and the first fetch beside npm's own -------

def memory_version():
    with open(os.path.join(DEPS, "node_modules", MEMORY_PKG, "package.json")) as f:
        return json.load(f)["version"]


def npm_install(spec, dest):
    """npm's own install of SPEC into the empty DEST, with an empty npm cache of its own and
    the flags palisade's fetch uses (no scripts, no audit, no dev dependencies)."""
    return [shutil.which("npm") or "npm", "install", "--prefix", dest,
            "--cache", os.path.join(dest, ".npm-cache"), "--ignore-scripts", "--no-audit",
            "--no-fund", "--no-update-notifier", "--omit=dev", "--loglevel=error", spec]


def bench_packages(s):
    """`palisade run -- npx -y PKG@V` from a warm cache against `palisade run -- node ENTRY`
    (the cache entry's own entry point) and plain `node ENTRY`, interleaved, to the first
    `initialize` response; then first fetches (`palisade prefetch`, empty cache) interleaved
    with `npm install` of the same spec into an empty directory. The cache lives in the work
    directory; the cached starts run with npm's registry unreachable, so they cannot fetch."""
    spec = "%s@%s" % (MEMORY_PKG, memory_version())
    # The fetches see the machine's npm configuration (certificates, proxy, registry), as a
    # user's `npx` would; ENV alone has none of it.
    net = dict(ENV, **{k: v for k, v in os.environ.items() if k in NPM_ENV or
                       k.lower().startswith("npm_config_")})
    root = os.path.join(s.work, "packages")
    os.makedirs(root)
    fetch = {"palisade prefetch (sandboxed npm, empty cache)": [],
             "npm install (empty directory and npm cache)": []}
    cache = None
    for i in range(CFG["fetch_rounds"]):
        c = os.path.join(root, "cache-%d" % i)
        n = os.path.join(root, "npm-%d" % i)
        os.makedirs(n)
        for name, cmd, env in (
                ("palisade prefetch (sandboxed npm, empty cache)",
                 [PALISADE, "prefetch", "--", "npx", "-y", spec],
                 dict(net, PALISADE_PACKAGE_CACHE=c)),
                ("npm install (empty directory and npm cache)", npm_install(spec, n), net)):
            t0 = time.perf_counter_ns()
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
            ms_ = (time.perf_counter_ns() - t0) / 1e6
            if r.returncode != 0:
                # No registry here: the package rows are left out, the rest of the run goes on.
                return {"skipped": "%s failed (exit %d): %s" % (
                    name, r.returncode, (r.stderr or r.stdout).strip()[-300:])}
            fetch[name].append(ms_)
        cache = c
        if i + 1 < CFG["fetch_rounds"]:
            shutil.rmtree(n, ignore_errors=True)
    with open(os.path.join(cache, "lock.json")) as f:
        lock = json.load(f)
    (entry,) = lock["packages"].values()
    script = os.path.join(cache, entry["ecosystem"], entry["entry"], entry["command"])
    cached_env = dict(ENV, PALISADE_PACKAGE_CACHE=cache, npm_config_registry=UNREACHABLE_NPM)
    variants = {
        "palisade run -- npx -y %s (cached)" % spec:
            [PALISADE, "run", "--", "npx", "-y", spec],
        "palisade run -- node ENTRY (the cache entry's entry point)":
            [PALISADE, "run", "--", NODE, script],
        # What the cached line is rewritten to: the entry run through its `#!` line.
        "palisade run -- ENTRY (through its #! line)": [PALISADE, "run", "--", script],
        "node ENTRY (no sandbox)": [NODE, script],
    }
    samples = {k: [] for k in variants}
    for cmd in variants.values():  # warm-up
        Server(cmd, env=cached_env).close()
    for _ in range(CFG["launch_rounds"]):
        for k, cmd in variants.items():
            srv = Server(cmd, env=cached_env)
            samples[k].append(srv.ms)
            srv.close()
    npx, node, shebang = list(samples.values())[:3]
    # Per round, npx minus node: drift between rounds cancels out of each pair.
    paired = [a - b for a, b in zip(npx, node)]
    # The same, npx minus its rewritten command: the lock read and rewrite alone.
    rewrite = [a - b for a, b in zip(npx, shebang)]
    return {"package": spec, "entry": os.path.relpath(script, cache),
            "start": {k: summary(v, "ms") for k, v in samples.items()},
            "npx_minus_node_paired": summary(paired, "ms"),
            "npx_minus_rewritten_paired": summary(rewrite, "ms"),
            "fetch": {k: summary(v, "ms") for k, v in fetch.items()}}


# --- per call, through bench-client --------------------------------------------------------

def bench_client(cmd, tool, args, calls, conc=1, warmup=50, roots=()):
    argv = [PALISADE, "bench-client", "--calls", str(calls), "--concurrency", str(conc),
            "--warmup", str(warmup), "--tool", tool, "--args", json.dumps(args)]
    for r in roots:
        argv += ["--root", r]
    r = subprocess.run(argv + ["--"] + cmd, capture_output=True, text=True, env=ENV)
    if r.returncode != 0:
        raise RuntimeError("bench-client %s failed: %s" % (tool, r.stderr[-500:]))
    d = json.loads(r.stdout)
    if d["ok"] != calls:
        raise RuntimeError("bench-client %s: %d of %d calls ok (errors %d, tool errors %d)" % (
            tool, d["ok"], calls, d["errors"], d["toolErrors"]))
    return d


def merge_runs(runs):
    """Median over repetitions of each run's median/p99/throughput, and the minimum median."""
    med = [r["latencyUs"]["median"] for r in runs]
    return {"reps": len(runs), "calls": runs[0]["calls"], "concurrency": runs[0]["concurrency"],
            "median_us": round(statistics.median(med), 1), "min_median_us": round(min(med), 1),
            "p99_us": round(statistics.median(r["latencyUs"]["p99"] for r in runs), 1),
            "throughput_per_s": round(statistics.median(r["throughputPerSec"] for r in runs))}


def relay_floor(cmd):
    """The same server behind `socat`: a relay that moves bytes and reads none of them, the
    floor of any gateway in a separate process (two more pipe hops, two more wake-ups)."""
    socat = shutil.which("socat")
    return [socat, "-b", str(1 << 20), "-", "EXEC:" + " ".join(cmd)] if socat else None


def bench_calls(s):
    path = os.path.join(s.data, "f.txt")
    variants = {
        "direct": (s.fs_server(), "stat"),
        "relay floor (socat)": (relay_floor(s.fs_server()), "stat"),
        "gateway": (s.serve_config("fs"), "fs0__stat"),
        "gateway, audit file": (s.serve_config("fs", name="audited", audit_log=True),
                                "fs0__stat"),
    }
    variants = {k: v for k, v in variants.items() if v[0]}
    out = {}
    for conc in (1, 16):
        runs = {k: [] for k in variants}
        for _ in range(CFG["call_reps"]):
            for k, (cmd, tool) in variants.items():
                runs[k].append(bench_client(cmd, tool, {"path": path}, CFG["calls"], conc))
        out["c%d" % conc] = {k: merge_runs(v) for k, v in runs.items()}
    return out


def bench_servers(s):
    path = os.path.join(s.data, "f.txt")
    out = []
    calls = max(200, CFG["calls"] // 2)
    for n in CFG["servers"]:
        cmd = s.serve_config("fs", n, "scale")
        # The last server's tool: the lookup must not favour the first.
        runs = [bench_client(cmd, "fs%d__stat" % (n - 1), {"path": path}, calls)
                for _ in range(CFG["call_reps"])]
        r = merge_runs(runs)
        r["servers"] = n
        out.append(r)
    return out


def bench_sizes(s):
    out = []
    gw = s.serve_config("fs", 1, "sizes")
    for size in CFG["sizes"]:
        path = os.path.join(s.data, "size-%d.txt" % size)
        calls = max(10, min(300, (64 << 20) // size // 2))
        args = {"path": path, "maxBytes": size}
        point = {"bytes": size, "calls": calls}
        runs = {"direct": [], "gateway": []}
        for _ in range(CFG["call_reps"]):
            runs["direct"].append(bench_client(s.fs_server(), "read", args, calls, warmup=3))
            runs["gateway"].append(bench_client(gw, "fs0__read", args, calls, warmup=3))
        for k, v in runs.items():
            point[k] = merge_runs(v)
        out.append(point)
    return out


# --- memory --------------------------------------------------------------------------------

def settle():
    time.sleep(0.5 if QUICK else 1.5)


def bench_memory(s, with_srt):
    out = {"gateway": [], "per_server": {}}
    # One server: the direct process tree, the same under `palisade run`, under srt.
    single = {"direct": s.fs_server(), "palisade run": s.run(s.fs_server())}
    if with_srt:
        single["srt"] = s.srt(s.fs_server())
    for how, cmd in single.items():
        srv = Server(cmd)
        settle()
        groups = tree_mem(srv.p.pid)
        srv.close()
        server_rss = sum(g[1] for n, g in groups.items() if n.startswith("palisade"))
        out["per_server"][how] = {
            "tree_rss_kb": sum(g[1] for g in groups.values()),
            "tree_pss_kb": sum(g[2] for g in groups.values()),
            "sandbox_rss_kb": sum(g[1] for n, g in groups.items() if not n.startswith("palisade")),
            "sandbox_pss_kb": sum(g[2] for n, g in groups.items() if not n.startswith("palisade")),
            "server_rss_kb": server_rss, "processes": {n: g[0] for n, g in groups.items()}}
    for n in CFG["memory_servers"]:
        srv = Server(s.serve_config("fs", n, "mem"))
        settle()
        groups = tree_mem(srv.p.pid)
        gw = mem_kb(srv.p.pid)
        srv.close()
        bw = groups.get("bwrap", [0, 0, 0])
        out["gateway"].append({
            "servers": n, "gateway_rss_kb": gw[1], "gateway_pss_kb": gw[2],
            "tree_rss_kb": sum(g[1] for g in groups.values()),
            "bwrap_processes": bw[0], "bwrap_rss_kb": bw[1], "bwrap_pss_kb": bw[2],
            "groups": {k: {"count": g[0], "rss_kb": g[1], "pss_kb": g[2]}
                       for k, g in groups.items()}})
    out["hot_functions"] = hot_layout(PALISADE)
    return out


def hot_layout(binary):
    """How much of scripts/hot-functions.txt the binary still has, and whether it leads.

    `span` is how far into the text the listed functions reach: about their own size when
    the release build ordered them (build.rs), most of the text when it did not.
    """
    listed = open(os.path.join(ROOT, "scripts/hot-functions.txt")).read().split()
    want = set(listed)
    text_start, found, size, end = None, 0, 0, 0
    for line in subprocess.run(["nm", "-n", "-S", binary], capture_output=True,
                               text=True).stdout.splitlines():
        f = line.split()
        if len(f) != 4 or f[2] not in "tTwW":
            continue
        addr = int(f[0], 16)
        text_start = addr if text_start is None else text_start
        if f[3] in want:
            want.discard(f[3])
            found += 1
            size += int(f[1], 16)
            end = max(end, addr + int(f[1], 16))
    return {"listed": len(listed), "found": found, "bytes": size,
            "span": end - (text_start or 0)}


# --- cargo benches -------------------------------------------------------------------------

def cargo_bench(name, extra):
    r = subprocess.run(["cargo", "bench", "--quiet", "--bench", name, "--"] + extra,
                       cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("cargo bench --bench %s failed: %s" % (name, r.stderr[-800:]))
    return r.stdout


def bench_scaling_micro():
    out = cargo_bench("scaling", ["--quick"] if QUICK else [])
    return json.loads(out.strip().splitlines()[-1])


def bench_egress():
    text = cargo_bench("egress", ["--quick"] if QUICK else [])
    setup, bulk, section = {}, {}, None
    for line in text.splitlines():
        if line.startswith("connection setup"):
            section = setup
        elif line.startswith("bulk"):
            section = bulk
        elif not line.startswith("  "):
            section = None
        elif section is setup and " us / " in line:
            label, rest = line.strip().rsplit("  ", 1)[0].strip(), line
            parts = line.split()
            # "  LABEL...   MED us /   P99 us"
            i = parts.index("us")
            setup[" ".join(parts[:i - 1])] = {"median_us": float(parts[i - 1]),
                                              "p99_us": float(parts[i + 2])}
        elif section is bulk and line.rstrip().endswith("GB/s"):
            parts = line.split()
            bulk[" ".join(parts[:-2])] = {"gb_per_s": float(parts[-2])}
    return {"setup": setup, "bulk": bulk, "text": text}


# --- output --------------------------------------------------------------------------------

def svg_chart(path, title, xlabel, ylabel, series, logx=True):
    """A small line chart: series = [(name, colour, [(x, y), ...])], log-scale x."""
    import math
    W, H, L, R, T, B = 560, 320, 70, 150, 36, 50
    xs = [x for _, _, pts in series for x, _ in pts]
    ys = [y for _, _, pts in series for _, y in pts]
    if not xs:
        return
    fx = (lambda v: math.log10(v)) if logx else (lambda v: v)
    x0, x1 = fx(min(xs)), fx(max(xs))
    x1 = x1 if x1 > x0 else x0 + 1
    y1 = max(ys) * 1.1 or 1
    px = lambda v: L + (fx(v) - x0) / (x1 - x0) * (W - L - R)
    py = lambda v: H - B - v / y1 * (H - T - B)
    e = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
         'font-family="sans-serif" font-size="11">' % (W, H),
         '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="20" font-size="13">%s</text>' % (L, title),
         '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, H - B, W - R, H - B),
         '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, T, L, H - B)]
    for i in range(5):
        v = y1 * i / 4
        e.append('<text x="%d" y="%.1f" text-anchor="end">%.3g</text>' % (L - 5, py(v) + 4, v))
        e.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (
            L, py(v), W - R, py(v)))
    for x in sorted(set(xs)):
        e.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (
            px(x), H - B + 15, format(x, ",")))
    e.append('<text x="%d" y="%d" text-anchor="middle">%s</text>' % (
        (L + W - R) / 2, H - 12, xlabel))
    e.append('<text x="15" y="%d" transform="rotate(-90 15 %d)" text-anchor="middle">%s</text>'
             % ((T + H - B) / 2, (T + H - B) / 2, ylabel))
    for i, (name, colour, pts) in enumerate(series):
        d = " ".join("%.1f,%.1f" % (px(x), py(y)) for x, y in pts)
        e.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>' % (d, colour))
        for x, y in pts:
            e.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (px(x), py(y), colour))
        e.append('<text x="%d" y="%d" fill="%s">%s</text>' % (W - R + 10, T + 15 + 16 * i,
                                                            colour, name))
    e.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(e) + "\n")


def main():
    work = tempfile.mkdtemp(prefix="palisade-bench-")
    try:
        s = Setup(work)
        srt_note = srt_works(s)
        with_srt = srt_note is None
        res = {"quick": QUICK, "config": CFG, "notes": {}}
        if srt_note:
            res["notes"]["srt"] = srt_note
        steps = [("true", lambda: bench_true(s, with_srt)),
                 ("launch", lambda: bench_launch(s, with_srt)),
                 ("packages", lambda: bench_packages(s)),
                 ("calls", lambda: bench_calls(s)),
                 ("memory", lambda: bench_memory(s, with_srt)),
                 ("servers", lambda: bench_servers(s)),
                 ("sizes", lambda: bench_sizes(s)),
                 ("micro", bench_scaling_micro),
                 ("egress", bench_egress)]
        only = os.environ.get("BENCH_ONLY")  # debugging: a comma list of steps
        for name, fn in steps:
            if only and name not in only.split(","):
                continue
            log("measuring: " + name)
            t0 = time.time()
            res[name] = fn()
            log("  %s done in %.1f s" % (name, time.time() - t0))
        res["machine"] = machine()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = os.path.join(ROOT, "target/bench/results.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")
    if only:
        return
    import bench_report
    page = bench_report.write(res, ROOT, svg_chart)
    log("wrote target/bench/results.json and %s (charts beside it in bench/)" % page)


def version(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return (r.stdout or r.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "missing"


def machine():
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    return {"kernel": platform.platform(), "cpus": os.cpu_count(), "cpu": cpu,
            "load_at_end": load, "bwrap": version(["bwrap", "--version"]),
            "node": version([NODE, "--version"]), "srt": version([SRT, "--version"]),
            "palisade": version([PALISADE, "--version"]), "rustc": version(["rustc", "--version"]),
            "command": os.environ.get("CMDLINE", "scripts/bench.sh"),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


if __name__ == "__main__":
    main()
