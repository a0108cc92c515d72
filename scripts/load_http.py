"""Load test of `palisade serve --http` (a script, not a timed test: it reports, never asserts).

N principals, each with its own token and so its own sandboxed fs-server behind the front,
call `fs__stat` in parallel through the Python `mcp` SDK's Streamable HTTP client. Side by
side in the same run, the same client makes the same calls over stdio, through `palisade
serve` and to the fs-server directly. Reports per-call latency (p50, p99) for each, the HTTP
front's added latency over stdio, errors, and memory: the gateway process's RSS per active
principal, and the whole process tree's (servers included).

Usage (from scripts/load-http.sh): load_http.py PALISADE PRINCIPALS CALLS
"""

import asyncio
import hashlib
import logging
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


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


async def timed_calls(s, path, calls, lat, errors):
    for _ in range(calls):
        t = time.perf_counter()
        try:
            r = await s.call_tool("fs__stat" if "fs__stat" in NAMES else "stat", {"path": path})
            if r.is_error:
                errors.append("isError")
        except Exception as e:  # counted, not raised: a load test reports
            errors.append(str(e))
        lat.append((time.perf_counter() - t) * 1e6)


NAMES = set()


async def http_principal(url, token, path, calls, lat, errors, ready, go):
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as s:
                await s.initialize()
                NAMES.update(t.name for t in (await s.list_tools()).tools)
                await timed_calls(s, path, 5, [], [])  # warm up
                ready.release()
                await go.wait()
                await timed_calls(s, path, calls, lat, errors)


async def stdio_run(cmd, path, calls):
    lat, errors = [], []
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params, errlog=devnull) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                NAMES.update(t.name for t in (await s.list_tools()).tools)
                await timed_calls(s, path, 5, [], [])
                await timed_calls(s, path, calls, lat, errors)
    return lat, errors


async def main(palisade, principals, calls):
    work = tempfile.mkdtemp(prefix="palisade-load-")
    target = os.path.join(work, "sandbox")
    config = os.path.join(work, "servers.json")
    with open(config, "w") as f:
        json.dump({"mcpServers": {"fs": {"command": palisade, "args": ["fs-server"]}},
                   "palisade": {"sandboxDir": target}}, f)
    tokens = {f"p{i}": secrets.token_hex(16) for i in range(principals)}
    tfile = os.path.join(work, "tokens")
    with open(os.open(tfile, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        for p, t in tokens.items():
            f.write(f"{p} {hashlib.sha256(t.encode()).hexdigest()}\n")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    proc = subprocess.Popen([palisade, "serve", "--config", config, "--http", f"127.0.0.1:{port}",
                             "--tokens", tfile], stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        idle_rss = rss_kb(proc.pid)
        url = f"http://127.0.0.1:{port}/mcp"
        # One principal alone, sequential calls: the front's own cost beside stdio's.
        solo_lat, solo_err = [], []
        ready, go = asyncio.Semaphore(0), asyncio.Event()
        go.set()
        first = next(iter(tokens))
        await http_principal(url, tokens[first], os.path.join(target, "principals", first),
                             calls, solo_lat, solo_err, ready, go)
        # Then every principal at once.
        lat, errors = [], []
        ready, go = asyncio.Semaphore(0), asyncio.Event()
        tasks = [asyncio.create_task(http_principal(
            url, t, os.path.join(target, "principals", p), calls, lat, errors, ready, go))
            for p, t in tokens.items()]
        for _ in tokens:
            await ready.acquire()
        active_rss = rss_kb(proc.pid)
        tree_rss = sum(rss_kb(p) for p in tree(proc.pid))
        go.set()
        started = time.perf_counter()
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - started
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    stdio_lat, stdio_err = await stdio_run([palisade, "serve", "--config", config], target, calls)
    direct_lat, _ = await stdio_run([palisade, "fs-server", "--root", target], target, calls)
    subprocess.run(["rm", "-rf", work], check=False)
    report = {
        "principals": principals, "calls_per_principal": calls,
        "one_principal_http_p50_us": pct(solo_lat, 0.5),
        "stdio_p50_us": pct(stdio_lat, 0.5), "stdio_p99_us": pct(stdio_lat, 0.99),
        "direct_p50_us": pct(direct_lat, 0.5),
        "http_over_stdio_p50_us": pct(solo_lat, 0.5) - pct(stdio_lat, 0.5),
        "all_principals_p50_us": pct(lat, 0.5), "all_principals_p99_us": pct(lat, 0.99),
        "calls_per_second": len(lat) / wall if wall else 0,
        "errors": len(errors) + len(stdio_err) + len(solo_err), "first_errors": errors[:3],
        "gateway_rss_idle_kb": idle_rss, "gateway_rss_active_kb": active_rss,
        "gateway_kb_per_principal": (active_rss - idle_rss) / principals,
        "tree_rss_kb": tree_rss, "tree_kb_per_principal": tree_rss / principals,
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    # The SDK logs each session's DELETE answered 202 (rmcp's Accepted) as a failure; noise here.
    logging.disable(logging.WARNING)
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
