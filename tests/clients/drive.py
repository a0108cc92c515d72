"""Drives `palisade serve` (or any MCP server command) with a real MCP client and prints one
JSON report on stdout for the Rust test (tests/gateway.rs) to assert on.

usage: drive.py SCENARIO -- COMMAND ARGS...

Scenarios using the Python `mcp` SDK client: aggregate, progress, cancel, crash, hang, blocked.
Scenarios using a raw line-by-line JSON-RPC client (to see exactly what is on the wire):
raw-tools (print the raw tools/list result), stdout (every stdout line must be JSON-RPC).
This script asserts nothing itself except where a step cannot continue; it reports.
"""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

DEADLINE = 30.0  # generous bound for "eventually" steps; never a timing assertion


def text_of(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


class Recorder:
    def __init__(self):
        self.methods = []

    async def __call__(self, message):
        method = getattr(message, "method", None)
        if method is None and hasattr(message, "root"):
            method = getattr(message.root, "method", None)
        self.methods.append(method or type(message).__name__)


async def with_session(cmd, body):
    rec = Recorder()
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    errlog = open(os.environ.get("DRIVE_ERRLOG", os.devnull), "a")
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write, message_handler=rec) as s:
            await s.initialize()
            return await body(s, rec)


async def tool_names(s):
    return [t.name for t in (await s.list_tools()).tools]


async def call(s, name, args, **kw):
    """Calls a tool; returns {"ok": bool, "text": str, "is_error": bool} or a JSON-RPC error."""
    try:
        r = await s.call_tool(name, args, **kw)
        return {"ok": True, "is_error": bool(r.is_error), "text": text_of(r)}
    except MCPError as e:
        return {"ok": False, "code": e.code, "text": e.message}


async def aggregate(s, rec):
    names = await tool_names(s)
    prompts = [p.name for p in (await s.list_prompts()).prompts]
    resources = [r.uri for r in (await s.list_resources()).resources]
    out = {
        "tools": names,
        "prompts": prompts,
        "resources": resources,
        "echo": await call(s, "everything__echo", {"message": "hello through palisade"}),
        "dirs": await call(s, "fs__list_allowed_directories", {}),
        "unknown": await call(s, "nosuch__tool", {}),
    }
    c = await s.complete(
        types.PromptReference(type="ref/prompt", name="everything__completable-prompt"),
        {"name": "department", "value": "Sa"},
    )
    out["completion"] = c.completion.values
    if resources:
        r = await s.read_resource(resources[0])
        out["read_first_resource"] = len(r.contents)
    if prompts:
        simple = [p for p in prompts if p.endswith("simple-prompt")] or prompts[:1]
        g = await s.get_prompt(simple[0], {})
        out["prompt_messages"] = len(g.messages)
    return out


async def progress(s, rec):
    seen = []

    async def on_progress(p, total, message):
        seen.append([p, total])

    r = await call(
        s,
        "everything__trigger-long-running-operation",
        {"duration": 1, "steps": 4},
        progress_callback=on_progress,
    )
    return {"result": r, "progress": seen}


async def cancel(s, rec):
    marker = os.environ["DRIVE_MARKER"]
    with anyio.move_on_after(1.5):
        await call(s, "probe__wait_for_cancel", {"marker": marker})
    deadline = time.monotonic() + DEADLINE
    while not os.path.exists(marker) and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    return {
        "marker_written": os.path.exists(marker),
        "after": await call(s, "probe__pid", {}),
    }


async def crash(s, rec):
    first = await call(s, "probe__instance", {})
    # The probe SIGKILLs itself while this call runs: a crash mid-call.
    inflight = await call(s, "probe__die_in", {"seconds": 0.5})
    # The gateway must still answer, announce the change, list the probe's tools as gone,
    # then bring them back.
    deadline = time.monotonic() + DEADLINE
    while "notifications/tools/list_changed" not in rec.methods and time.monotonic() < deadline:
        await anyio.sleep(0.02)
    listed_after_crash = await tool_names(s)
    deadline = time.monotonic() + DEADLINE
    names = listed_after_crash
    while "probe__pid" not in names and time.monotonic() < deadline:
        await anyio.sleep(0.1)
        names = await tool_names(s)
    again = await call(s, "probe__instance", {})
    return {
        "first": first,
        "inflight": inflight,
        "tools_after_crash": listed_after_crash,
        "tools_after_restart": names,
        "second": again,
        "other_server_still_works": await call(s, "everything__echo", {"message": "x"}),
        "notifications": rec.methods,
    }


async def logging(s, rec):
    """Turns on server-everything's simulated logging and waits for a relayed message."""
    got = []
    rec.logs = got
    await s.set_logging_level("debug")
    r = await call(s, "everything__toggle-simulated-logging", {})
    deadline = time.monotonic() + DEADLINE
    while not any(m == "notifications/message" for m in rec.methods) and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    return {"toggle": r, "notifications": rec.methods}


async def timeouts(s, rec):
    """A hung request ends in an error at the configured call timeout and is cancelled
    downstream; an over-size answer (a line over 16 MiB) is a protocol fault of the server,
    which is restarted: the call's error says so, and the server answers again after."""
    marker = os.environ["DRIVE_MARKER"]
    hung = await call(s, "probe__wait_for_cancel", {"marker": marker})
    deadline = time.monotonic() + DEADLINE
    while not os.path.exists(marker) and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    return {
        "hung": hung,
        "hung_cancelled_downstream": os.path.exists(marker),
        "huge": await call(s, "probe__huge", {"mib": 17}),
        "small_after": await until_ok(s, "probe__huge", {"mib": 0}),
    }


async def until_ok(s, tool, args):
    """Calls `tool` until it succeeds (a restarted server is back) or DEADLINE passes."""
    deadline = time.monotonic() + DEADLINE
    while True:
        r = await call(s, tool, args)
        if r["ok"] or time.monotonic() > deadline:
            return r
        await anyio.sleep(0.1)


async def hang(s, rec):
    return {
        "tools": await tool_names(s),
        "mute_call": await call(s, "mute__anything", {}),
        "echo": await call(s, "everything__echo", {"message": "still here"}),
    }


async def blocked(s, rec):
    target = os.environ["DRIVE_TARGET"]
    return {
        "raise": await call(s, "probe__write_raise", {"path": target + "/raise.txt", "text": "x"}),
        "result": await call(s, "probe__write_result", {"path": target + "/result.txt", "text": "x"}),
        "fs": await call(s, "fs__write_file", {"path": target + "/fs.txt", "content": "x"}),
        "files_present": sorted(os.listdir(target)),
    }


class Raw:
    """A line-oriented JSON-RPC client that keeps every stdout line as it was sent."""

    def __init__(self, cmd):
        self.p = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(os.environ.get("DRIVE_ERRLOG", os.devnull), "a"),
        )
        self.lines = []
        self.q = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 1

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line.decode("utf-8", "replace"))
            self.q.put(line)
        self.q.put(None)

    def send(self, obj):
        self.p.stdin.write((json.dumps(obj) + "\n").encode())
        self.p.stdin.flush()

    def request(self, method, params=None):
        rid = self.next_id
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            try:
                line = self.q.get(timeout=DEADLINE)
            except queue.Empty:
                break
            if line is None:
                raise RuntimeError("server closed stdout")
            msg = json.loads(line)
            if "method" in msg and "id" in msg:
                self._answer(msg)
            elif msg.get("id") == rid and ("result" in msg or "error" in msg):
                return msg
        raise RuntimeError(f"no answer to {method}")

    def _answer(self, req):
        """Answers a server-to-client request: roots/list with no roots, anything else with
        method-not-found (this client offers nothing else)."""
        if req["method"] == "roots/list":
            self.send({"jsonrpc": "2.0", "id": req["id"], "result": {"roots": []}})
        else:
            self.send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32601, "message": "not supported"}})

    def initialize(self):
        r = self.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                # Declares roots like palisade does downstream, so that servers which list
                # tools by client capability (server-everything's get-roots-list) list the
                # same set direct and through the gateway.
                "capabilities": {"roots": {"listChanged": True}},
                "clientInfo": {"name": "raw-test-client", "version": "1"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return r

    def close(self, grace=DEADLINE):
        """Closes stdin and waits; after `grace` seconds sends SIGTERM (some reference
        servers keep timers running and never exit on EOF), then SIGKILL."""
        self.p.stdin.close()
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                self.p.send_signal(sig)
            try:
                return self.p.wait(timeout=grace) if sig is None else self.p.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                continue
        return "unkillable"


def raw_tools(cmd):
    c = Raw(cmd)
    init = c.initialize()
    tools = c.request("tools/list")
    c.close(grace=2)
    return {"initialize": init, "tools": tools["result"]["tools"]}


def descendants(root):
    """Every live process below `root` (by /proc parent links): palisade's children and
    theirs (bwrap, the servers), with host pids."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    stat = f.read()
                parent[int(d)] = int(stat[stat.rindex(")") + 2 :].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    out, frontier = set(), {root}
    while frontier:
        nxt = {p for p, pp in parent.items() if pp in frontier and p not in out}
        out |= nxt
        frontier = nxt
    return sorted(out)


def alive(pids):
    """The pids still running (zombies count as gone: they are only waiting to be reaped by
    init once palisade has exited)."""
    left = []
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                stat = f.read()
            if stat[stat.rindex(")") + 2] != "Z":
                left.append(p)
        except OSError:
            pass
    return left


def stdout_only(cmd):
    c = Raw(cmd)
    c.initialize()
    c.request("tools/list")
    c.request("tools/call", {"name": "probe__pid", "arguments": {}})
    children = descendants(c.p.pid)
    c.request("tools/call", {"name": "nosuch__tool", "arguments": {}})
    c.request("tools/call", {"name": "probe__write_result", "arguments": {"path": "/proc/nope/x", "text": "x"}})
    c.request("prompts/list")
    c.request("resources/list")
    code = c.close()
    bad = []
    for line in c.lines:
        try:
            msg = json.loads(line)
            if msg.get("jsonrpc") != "2.0":
                bad.append(line)
        except ValueError:
            bad.append(line)
    return {
        "lines": len(c.lines),
        "bad_lines": bad,
        "exit": code,
        "children": children,
        "children_alive": alive(children),
    }


def sigterm(cmd):
    """SIGTERM (not stdin EOF) ends the gateway, and its children are reaped."""
    c = Raw(cmd)
    c.initialize()
    c.request("tools/call", {"name": "probe__pid", "arguments": {}})
    children = descendants(c.p.pid)
    c.p.send_signal(signal.SIGTERM)
    try:
        code = c.p.wait(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        c.p.kill()
        code = "killed"
    return {"exit": code, "children": children, "children_alive": alive(children)}


def main():
    scenario = sys.argv[1]
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    if scenario == "raw-tools":
        report = raw_tools(cmd)
    elif scenario == "stdout":
        report = stdout_only(cmd)
    elif scenario == "sigterm":
        report = sigterm(cmd)
    else:
        body = globals()[scenario]
        report = anyio.run(with_session, cmd, body)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
