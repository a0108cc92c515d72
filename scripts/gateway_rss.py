#!/usr/bin/env python3
"""The gateway's own memory with five sandboxed fs-servers, for a few binaries side by side.

Usage (from the repository root): python3 scripts/gateway_rss.py BINARY [BINARY...]
For each binary, twice and interleaved: `serve` with five fs-servers (each in its sandbox,
`sandboxPolicy: warn`), 200 `stat` calls spread over them, 1.5 s of rest, then the
gateway's `/proc/PID/smaps_rollup` (RSS, PSS, anonymous). A measurement, not a test: it
asserts nothing. docs/benchmarks.md (seventh round) quotes it.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ALLOW = os.path.abspath("tests/fixtures/allow-all-policy.json")


def write_data(d):
    """The files the calls read: `f.txt` (100 bytes, for stat) and `big.txt` (1 MiB)."""
    data = os.path.join(d, "data")
    os.makedirs(data)
    with open(os.path.join(data, "f.txt"), "w") as f:
        f.write("x" * 100)
    with open(os.path.join(data, "big.txt"), "w") as f:
        f.write("y" * (1 << 20))
    return data


def measure(binary, d, tag):
    data = os.path.join(d, "data")
    config = os.path.join(d, tag + ".json")
    with open(config, "w") as f:
        json.dump({"mcpServers": {"fs%d" % i: {
            "command": binary, "args": ["fs-server", "--root", data],
            "sandbox": {"filesystem": {"allowRead": [data]}}} for i in range(5)},
            "palisade": {"sandboxPolicy": "warn", "policy": ALLOW,
                         "sandboxDir": os.path.join(d, "sandbox-" + tag)}}, f)
    p = subprocess.Popen([binary, "serve", "--config", config], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def ask(message):
        p.stdin.write((json.dumps(message) + "\n").encode())
        p.stdin.flush()
        if "id" in message and not p.stdout.readline():
            raise SystemExit("%s: serve ended early" % binary)

    ask({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "gateway_rss", "version": "1"}}})
    ask({"jsonrpc": "2.0", "method": "notifications/initialized"})
    ask({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    for i in range(200):
        ask({"jsonrpc": "2.0", "id": 2 + i, "method": "tools/call", "params": {
            "name": "fs%d__stat" % (i % 5), "arguments": {"path": os.path.join(data, "f.txt")}}})
    time.sleep(1.5)
    vals = {}
    with open("/proc/%d/smaps_rollup" % p.pid) as f:
        for line in f:
            key, _, rest = line.partition(":")
            if rest.strip().endswith("kB"):
                vals[key] = int(rest.split()[0])
    p.stdin.close()
    p.wait()
    return vals["Rss"], vals["Pss"], vals.get("Anonymous", 0)


def main():
    binaries = [os.path.abspath(b) for b in sys.argv[1:]]
    if not binaries:
        raise SystemExit(__doc__)
    d = os.path.abspath(tempfile.mkdtemp(prefix="gateway-rss-", dir="target"))
    try:
        write_data(d)
        for _ in range(2):
            for n, b in enumerate(binaries):
                rss, pss, anon = measure(b, d, "b%d" % n)
                print("%s  RSS %6d kB  PSS %6d kB  anonymous %6d kB" % (b, rss, pss, anon))
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
