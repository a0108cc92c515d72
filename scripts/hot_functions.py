#!/usr/bin/env python3
"""Regenerate scripts/hot-functions.txt: the functions palisade runs, in the order it first runs them.

Usage (from the repository root, as root, on a release build):
    python3 scripts/hot_functions.py [BINARY] [OUT]
BINARY defaults to target/release/palisade, OUT to scripts/hot-functions.txt.

Why: the release build links these functions first and together (build.rs passes the file to
the linker as a symbol ordering). The kernel maps a program's code in 64 KiB windows around
each page it touches, so code a run uses, scattered over 12 MB of text, makes nearly all of it
resident; gathered at the front, it is a few windows. docs/benchmarks.md ("Hot code first")
has the figures.

How: a uprobe on every function of BINARY (tracefs, so root), then the workloads the targets
measure, in turn: `--version`; `run --backend landlock -- true`;
`run -- true`; `serve` on stdio with one and with five sandboxed fs-servers (stat calls one at
a time and sixteen in flight, a 1 MiB read, a denied call, tools/list), once without and once
with an `auditLog`. Every process running BINARY counts (the fs-servers are BINARY too), and
the names are written workload by workload in the order of their first hit, so the launch path
comes first. Each probe is turned off at its first hit, and all are removed before the script
exits.

The names carry the hashes rustc gives each symbol, which stay put across edits of other code
but change with the compiler version or a dependency's version: regenerate after either (and
after large changes to the call path). A stale file only costs speed; names missing from the
binary are skipped. scripts/bench.sh reports how many of the names the binary still has.
"""
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from gateway_rss import write_data

TRACING = "/sys/kernel/tracing"
GROUP = "palisade_hot"
ALLOW = os.path.abspath("tests/fixtures/allow-all-policy.json")


def text_symbols(binary):
    """(file offset, name) of every function, one per address."""
    delta = None
    for line in subprocess.run(["readelf", "-lW", binary], capture_output=True,
                               text=True, check=True).stdout.splitlines():
        f = line.split()
        if f and f[0] == "LOAD" and "E" in f[-2]:
            delta = int(f[2], 16) - int(f[1], 16)
    if delta is None:
        raise SystemExit("%s: no executable segment" % binary)
    seen, out = set(), []
    for line in subprocess.run(["nm", "-n", binary], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        f = line.split()
        if len(f) == 3 and f[1] in "tTwW":
            addr = int(f[0], 16)
            if addr not in seen:
                seen.add(addr)
                out.append((addr - delta, f[2]))
    return out


def write(path, text):
    with open(os.path.join(TRACING, path), "w") as f:
        f.write(text)


def add_probes(binary, symbols):
    # One write per probe: the kernel parses each write as whole lines.
    fd = os.open(os.path.join(TRACING, "uprobe_events"), os.O_WRONLY | os.O_APPEND)
    try:
        for i, (offset, _) in enumerate(symbols):
            os.write(fd, ("p:%s/f%d %s:0x%x\n" % (GROUP, i, binary, offset)).encode())
    finally:
        os.close(fd)
    write("buffer_size_kb", "8192")
    write("trace", "")
    write("events/%s/enable" % GROUP, "1")


def remove_probes():
    """Removes this script's probes: all at once when no one else has any (the kernel takes
    seconds for that, and minutes one by one, as uprobe_events takes no wildcard)."""
    if not os.path.isdir(os.path.join(TRACING, "events", GROUP)):
        return
    write("events/%s/enable" % GROUP, "0")
    with open(os.path.join(TRACING, "uprobe_events")) as f:
        others = [line for line in f if not line.startswith("p:%s/" % GROUP)]
    if not others:
        write("uprobe_events", "")
        return
    fd = os.open(os.path.join(TRACING, "uprobe_events"), os.O_WRONLY | os.O_APPEND)
    try:
        for name in os.listdir(os.path.join(TRACING, "events", GROUP)):
            if name not in ("enable", "filter"):
                os.write(fd, ("-:%s/%s\n" % (GROUP, name)).encode())
    finally:
        os.close(fd)


class FirstHits:
    """Reads trace_pipe on one thread; another turns each probe off after its first hit.

    Turning probes off keeps a hot loop (a 1 MiB result escaped byte by byte) from flooding
    the ring buffer, which would overwrite first hits not yet read; it is slow (the kernel
    waits for a grace period each time), so the reader does not wait for it.
    """

    def __init__(self):
        self.order = []
        self.lock = threading.Lock()
        self.last = time.monotonic()
        self.off = queue.Queue()
        self.pipe = open(os.path.join(TRACING, "trace_pipe"), "rb", buffering=0)
        threading.Thread(target=self.read, daemon=True).start()
        threading.Thread(target=self.turn_off, daemon=True).start()

    def read(self):
        pattern = re.compile(rb" f(\d+): \(")
        seen, rest = set(), b""
        while True:
            chunk = self.pipe.read(1 << 16)
            if not chunk:
                return
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                m = pattern.search(line)
                if m and int(m.group(1)) not in seen:
                    n = int(m.group(1))
                    seen.add(n)
                    self.off.put(n)
                    with self.lock:
                        self.order.append(n)
            self.last = time.monotonic()

    def turn_off(self):
        while True:
            n = self.off.get()
            try:
                write("events/%s/f%d/enable" % (GROUP, n), "0")
            except OSError:
                pass  # being removed: the run is over
            self.off.task_done()

    def take(self):
        """The first hits so far, once the probes hit are off and the pipe has gone quiet."""
        self.off.join()
        while time.monotonic() - self.last < 1.0:
            time.sleep(0.2)
        with self.lock:
            taken, self.order = self.order, []
        return taken


def session(binary, config, data, servers):
    """Drive `serve` over stdio the way the benchmarks do, and check it answered."""
    p = subprocess.Popen([binary, "serve", "--config", config], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    next_id = [0]

    def send(method, params, notify=False):
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notify:
            message["id"] = next_id[0]
            next_id[0] += 1
        p.stdin.write((json.dumps(message) + "\n").encode())

    def answers(n):
        got = [json.loads(p.stdout.readline() or "null") for _ in range(n)]
        if None in got:
            raise SystemExit("serve ended early")
        return got

    send("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "hot_functions", "version": "1"}})
    p.stdin.flush()
    answers(1)
    send("notifications/initialized", {}, notify=True)
    send("tools/list", {})
    p.stdin.flush()
    answers(1)
    stat = {"path": os.path.join(data, "f.txt")}
    for i in range(100):
        send("tools/call", {"name": "fs%d__stat" % (i % servers), "arguments": stat})
        p.stdin.flush()
        answers(1)
    for _ in range(20):
        for i in range(16):
            send("tools/call", {"name": "fs%d__stat" % (i % servers), "arguments": stat})
        p.stdin.flush()
        answers(16)
    for _ in range(5):
        send("tools/call", {"name": "fs0__read", "arguments": {
            "path": os.path.join(data, "big.txt"), "maxBytes": 1 << 20}})
        p.stdin.flush()
        answers(1)
    # Outside the granted root: a refusal (the server's own, under the allow-all policy).
    send("tools/call", {"name": "fs0__stat", "arguments": {"path": "/etc/shadow"}})
    p.stdin.flush()
    (refused,) = answers(1)
    if "error" not in refused and not refused.get("result", {}).get("isError"):
        raise SystemExit("a call outside the root was not refused: %s" % refused)
    p.stdin.close()
    if p.wait(timeout=30):
        raise SystemExit("serve exited with %d" % p.returncode)


def workloads(binary, d):
    data = write_data(d)  # the files the benchmark scripts' calls read

    def run(*args):
        subprocess.run([binary, *args], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)

    yield "version", lambda: run("--version")
    yield "run landlock", lambda: run("run", "--backend", "landlock", "--", "/usr/bin/true")
    yield "run bwrap", lambda: run("run", "--", "/usr/bin/true")
    for servers, audit in ((1, False), (5, False), (5, True)):
        config = os.path.join(d, "c%d%s.json" % (servers, "a" if audit else ""))
        block = {"sandboxPolicy": "warn", "policy": ALLOW,
                 "sandboxDir": os.path.join(d, "sandbox")}
        if audit:
            block["auditLog"] = os.path.join(d, "audit.jsonl")
        with open(config, "w") as f:
            json.dump({"mcpServers": {"fs%d" % i: {
                "command": binary, "args": ["fs-server", "--root", data],
                "sandbox": {"filesystem": {"allowRead": [data]}}} for i in range(servers)},
                "palisade": block}, f)
        yield ("serve, %d servers%s" % (servers, ", audit log" if audit else ""),
               lambda c=config, n=servers: session(binary, c, data, n))


def main():
    binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/palisade")
    out = sys.argv[2] if len(sys.argv) > 2 else "scripts/hot-functions.txt"
    if os.geteuid() != 0 or not os.path.exists(os.path.join(TRACING, "uprobe_events")):
        raise SystemExit("needs root and tracefs at %s (uprobes); if it is not mounted: "
                         "mount -t tracefs nodev %s" % (TRACING, TRACING))
    symbols = text_symbols(binary)
    d = os.path.abspath(tempfile.mkdtemp(prefix="hot-functions-", dir="target"))
    names, seen = [], set()
    try:
        remove_probes()
        add_probes(binary, symbols)
        hits = FirstHits()
        for label, work in workloads(binary, d):
            work()
            fresh = [symbols[n][1] for n in hits.take() if symbols[n][1] not in seen]
            seen.update(fresh)
            names += fresh
            print("%-28s %5d new functions" % (label, len(fresh)), file=sys.stderr)
        with open(out, "w") as f:
            f.write("\n".join(names) + "\n")
        print("written; removing the probes", file=sys.stderr)
    finally:
        remove_probes()
        shutil.rmtree(d, ignore_errors=True)
    size = {n: 0 for n in names}
    for line in subprocess.run(["nm", "-S", binary], capture_output=True,
                               text=True).stdout.splitlines():
        f = line.split()
        if len(f) == 4 and f[3] in size:
            size[f[3]] = int(f[1], 16)
    print("%s: %d functions, %.1f MB of code, of %d in %s" % (
        out, len(names), sum(size.values()) / 1e6, len(symbols), binary), file=sys.stderr)


if __name__ == "__main__":
    main()
