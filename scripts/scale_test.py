"""Scale-out test: R `palisade serve --http` replicas behind HAProxy hashing on the
Authorization header, M principals calling `fs__stat` in a loop, one replica killed (SIGKILL)
mid-run. A report, printed as a table; exits 1 when a property does not hold:

- before the kill, each principal's calls all land on one replica;
- after it, only the killed replica's principals see errors (each ends promptly: a request
  that takes longer than HANG_S counts as a hang), and their later calls succeed on one other
  replica after a new session (their "restart");
- every other principal keeps its replica and sees no error.

Loopback only. Raw MCP Streamable HTTP (2025-11-25) over httpx, so that every request's replica
(the `X-Replica` header HAProxy adds) and every failure is seen as it happened.
Usage (from scripts/scale-test.sh): scale_test.py PALISADE HAPROXY REPLICAS PRINCIPALS SECONDS
"""

import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import httpx

from serve_http import start_on_any_port

HANG_S = 10.0
PROTO = "2025-11-25"


def free_port():
    """A port for HAProxy, which cannot report one the kernel picked (only palisade can)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


def wait_http(url, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.02)
    return False


def rpc_result(resp, want_id):
    """The JSON-RPC message answering want_id, from a JSON or SSE body (a streamed response:
    an SSE stream is read only up to that message, as an SDK client does)."""
    ctype = resp.headers.get("content-type", "")
    if "text/event-stream" in ctype:
        for line in resp.iter_lines():
            if line.startswith("data:"):
                data = line[5:].strip()
                if data:
                    msg = json.loads(data)
                    if msg.get("id") == want_id:
                        return msg
        raise RuntimeError("no answer in the event stream")
    return json.loads(resp.read())


class Principal(threading.Thread):
    def __init__(self, name, token, url, sandbox_of, stop):
        super().__init__(daemon=True)
        self.name, self.url, self.sandbox_of, self.stop = name, url, sandbox_of, stop
        self.http = httpx.Client(timeout=HANG_S, headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json"})
        self.session = None
        self.replica = None
        self.next_id = 1
        self.events = []  # (t_start, t_end, kind, replica, detail); kind ok|error|hang|session

    def post(self, body, want_id=None):
        """POSTs one message; returns (status, headers, the answer to want_id or None)."""
        headers = {}
        if self.session:
            headers = {"Mcp-Session-Id": self.session, "MCP-Protocol-Version": PROTO}
        with self.http.stream("POST", self.url, content=json.dumps(body), headers=headers) as r:
            if r.status_code != 200 or want_id is None:
                return r.status_code, r.headers, None
            return r.status_code, r.headers, rpc_result(r, want_id)

    def new_session(self):
        self.session = None
        i = self.next_id
        self.next_id += 1
        code, headers, _ = self.post({"jsonrpc": "2.0", "id": i, "method": "initialize",
                                      "params": {"protocolVersion": PROTO, "capabilities": {},
                                                 "clientInfo": {"name": "scale-test",
                                                                "version": "1"}}}, i)
        if code != 200:
            raise RuntimeError(f"initialize: HTTP {code}")
        rep = headers.get("x-replica")
        self.session = headers.get("mcp-session-id")
        self.replica = rep
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return rep

    def call(self):
        i = self.next_id
        self.next_id += 1
        path = self.sandbox_of[self.replica] + "/principals/" + self.name
        code, headers, msg = self.post({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                                        "params": {"name": "fs__stat",
                                                   "arguments": {"path": path}}}, i)
        if code != 200:
            raise RuntimeError(f"HTTP {code}")
        rep = headers.get("x-replica")
        if "error" in msg or msg.get("result", {}).get("isError"):
            raise RuntimeError(json.dumps(msg)[:160])
        return rep

    def run(self):
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                if self.session is None:
                    rep = self.new_session()
                    self.events.append((t0, time.monotonic(), "session", rep, ""))
                    continue
                rep = self.call()
                self.events.append((t0, time.monotonic(), "ok", rep, ""))
            except Exception as e:  # recorded: the report judges
                t1 = time.monotonic()
                kind = "hang" if t1 - t0 >= HANG_S else "error"
                self.events.append((t0, t1, kind, self.replica, f"{type(e).__name__}: {e}"[:160]))
                self.session = None  # the restart: a new session on whichever replica answers
                time.sleep(0.05)
        self.http.close()


def main(palisade, haproxy, replicas, principals, seconds):
    work = tempfile.mkdtemp(prefix="palisade-scale.")
    procs = []
    try:
        tokens = {f"p{i:02d}": secrets.token_hex(16) for i in range(principals)}
        tok_path = os.path.join(work, "tokens")
        with open(tok_path, "w") as f:
            for p, t in tokens.items():
                f.write(f"{p} {hashlib.sha256(t.encode()).hexdigest()}\n")
        os.chmod(tok_path, 0o600)
        reps, sandbox_of = {}, {}
        for r in range(replicas):
            name = f"r{r}"
            d = os.path.join(work, name)
            os.mkdir(d)
            sandbox_of[name] = os.path.realpath(os.path.join(d, "sandbox"))
            cfg = os.path.join(d, "servers.json")
            with open(cfg, "w") as f:
                json.dump({"mcpServers": {"fs": {"command": palisade, "args": ["fs-server"]}},
                           "palisade": {"sandboxDir": sandbox_of[name],
                                        "auditLog": os.path.join(d, "audit.jsonl"),
                                        "policy": None}}, f)
            log_path = os.path.join(d, "stderr.log")
            try:
                p, port = start_on_any_port([palisade, "serve", "--config", cfg, "--tokens",
                                             tok_path], log_path)
            except RuntimeError as e:
                print(f"replica {name}: {e}", file=sys.stderr)
                return 1
            procs.append(p)
            reps[name] = (p, port)
        for name, (_, port) in reps.items():
            if not wait_http(f"http://127.0.0.1:{port}/readyz"):
                print(f"replica {name} did not become ready", file=sys.stderr)
                return 1
        front = free_port()
        hcfg = os.path.join(work, "haproxy.cfg")
        with open(hcfg, "w") as f:
            f.write(f"""global
    maxconn 1024
defaults
    mode http
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    retries 2
    option redispatch 1
    option http-no-delay
frontend mcp
    bind 127.0.0.1:{front}
    default_backend palisade
backend palisade
    balance hdr(Authorization)
    hash-type consistent
    option httpchk GET /healthz
    http-response set-header X-Replica %[srv_name]
""")
            for name, (_, port) in reps.items():
                f.write(f"    server {name} 127.0.0.1:{port} check inter 100ms fall 1 rise 2\n")
        hp = subprocess.Popen([haproxy, "-f", hcfg, "-db"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL,
                              stderr=open(os.path.join(work, "haproxy.log"), "w"))
        procs.append(hp)
        if not wait_http(f"http://127.0.0.1:{front}/healthz"):
            print("haproxy did not come up: " + open(os.path.join(work, "haproxy.log")).read(),
                  file=sys.stderr)
            return 1

        stop = threading.Event()
        ps = [Principal(n, t, f"http://127.0.0.1:{front}/mcp", sandbox_of, stop)
              for n, t in tokens.items()]
        t_start = time.monotonic()
        for p in ps:
            p.start()
        time.sleep(seconds / 2)
        # The victim: the replica holding the most principals right now.
        load = {}
        for p in ps:
            load[p.replica] = load.get(p.replica, 0) + 1
        victim = max((n for n in reps if n in load), key=lambda n: load[n])
        reps[victim][0].send_signal(signal.SIGKILL)
        reps[victim][0].wait()
        # Taken once the victim is gone: a call started between the clock read and the
        # signal's delivery could still be answered by the victim, and would count as "after".
        t_kill = time.monotonic()
        time.sleep(seconds / 2)
        stop.set()
        for p in ps:
            p.join(HANG_S + 5)
        stuck = [p.name for p in ps if p.is_alive()]

        # Judge.
        rows, failures = [], []
        lat_ok = []
        failover = []
        for p in ps:
            before = {e[3] for e in p.events if e[1] < t_kill and e[2] in ("ok", "session")}
            after = [e for e in p.events if e[0] > t_kill]
            errs = [e for e in p.events if e[2] in ("error", "hang")]
            hangs = [e for e in errs if e[2] == "hang"]
            ok_after = [e for e in after if e[2] == "ok"]
            reps_after = {e[3] for e in ok_after}
            lat_ok += [(e[1] - e[0]) * 1000 for e in p.events if e[2] == "ok"]
            victim_p = before == {victim}
            n_ok = sum(1 for e in p.events if e[2] == "ok")
            if len(before) != 1:
                failures.append(f"{p.name}: calls before the kill landed on {sorted(before)}")
            if hangs:
                failures.append(f"{p.name}: {len(hangs)} request(s) hung >= {HANG_S}s")
            if victim_p:
                if not ok_after or victim in reps_after or len(reps_after) != 1:
                    failures.append(f"{p.name}: after the kill ok on {sorted(reps_after)}")
                else:
                    first = min(e[1] for e in ok_after)
                    failover.append((first - t_kill) * 1000)
            else:
                if errs:
                    failures.append(f"{p.name} (not on the victim): {len(errs)} errors: "
                                    f"{errs[0][4]}")
                if reps_after - before:
                    failures.append(f"{p.name} (not on the victim) moved to {sorted(reps_after)}")
            max_err = max(((e[1] - e[0]) * 1000 for e in errs), default=0)
            rows.append((p.name, ",".join(sorted(before)), ",".join(sorted(reps_after)) or "-",
                         n_ok, len(errs), f"{max_err:.0f}", "yes" if victim_p else ""))
        if stuck:
            failures.append(f"threads still blocked after stop: {stuck}")

        print(f"scale test: {replicas} replicas behind HAProxy (balance hdr(Authorization), "
              f"hash-type consistent), {principals} principals, {seconds}s, "
              f"SIGKILL of {victim} at {(t_kill - t_start):.1f}s")
        print()
        print("| principal | replica before kill | replica after | ok calls | errors | "
              "slowest error (ms) | on killed replica |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print("| " + " | ".join(str(x) for x in r) + " |")
        print()
        victims = sum(1 for r in rows if r[6])
        print(f"calls ok: {len(lat_ok)}, latency p50 {pct(lat_ok, .5):.2f} ms, "
              f"p99 {pct(lat_ok, .99):.2f} ms")
        print(f"principals on the killed replica: {victims}/{principals}; failover (kill to "
              f"first ok call on another replica): median {pct(failover, .5):.0f} ms, "
              f"max {max(failover, default=float('nan')):.0f} ms")
        print(f"errors outside the killed replica's principals: "
              f"{sum(r[4] for r in rows if not r[6])}")
        if failures:
            print("\nFAILED:")
            for f in failures:
                print("  " + f)
            return 1
        print("\nPASS: one replica per principal; only the killed replica's principals "
              "restarted, every error prompt, none hung")
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if os.environ.get("SCALE_KEEP"):
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                  float(sys.argv[5])))
