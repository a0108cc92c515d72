"""Shared pieces of the Python `mcp` SDK drivers (tests/clients/*_drive.py, calls.py and
tests/compat/client.py): starting a client session over stdio, calling a tool and reading its
text, and answering file-IPC escalation requests the way a person's tool would.

Drivers report; they never assert (the Rust tests do), so nothing here decides pass or fail.
Bounds here only guard against a hung test; none is a timing assertion.
"""

import asyncio
import contextlib
import glob
import json
import os
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError


def command_after_dashes(argv=None):
    """The server command line: everything after the first `--` of the driver's arguments."""
    argv = sys.argv if argv is None else argv
    return argv[argv.index("--") + 1 :]


@contextlib.asynccontextmanager
async def session(cmd, errlog_var="DRIVE_ERRLOG", errlog_mode="a", init_timeout=None, **kw):
    """An initialized ClientSession with `cmd` over stdio. The server's stderr goes to the file
    named by the environment variable `errlog_var` (nowhere when unset); `kw` goes to
    ClientSession (callbacks, message_handler)."""
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    with open(os.environ.get(errlog_var, os.devnull), errlog_mode) as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, **kw) as s:
                if init_timeout is None:
                    await s.initialize()
                else:
                    await asyncio.wait_for(s.initialize(), init_timeout)
                yield s


def text_of(result) -> str:
    """The text blocks of a tool result, one per line."""
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def call(s, name, args, **kw):
    """{"ok": True, "is_error": result.isError, "text"} or, for a JSON-RPC error,
    {"ok": False, "code", "text": its message}."""
    try:
        r = await s.call_tool(name, args, **kw)
        return {"ok": True, "is_error": bool(r.is_error), "text": text_of(r)}
    except MCPError as e:
        return {"ok": False, "code": e.code, "text": e.message}


async def tool_names(s, timeout=30):
    return [t.name for t in (await asyncio.wait_for(s.list_tools(), timeout)).tools]


async def call_each(s, calls, timeout=60):
    """Makes each of `calls` ([{"tool", "args"}]) in order; returns [{"tool", "error", "text"}].
    Any failure, a JSON-RPC error included, is reported as error=true with its message (the
    agent sees it the same way)."""
    out = []
    for c in calls:
        try:
            r = await asyncio.wait_for(s.call_tool(c["tool"], c.get("args", {})), timeout)
            text = "\n".join(getattr(b, "text", "") for b in r.content)
            out.append({"tool": c["tool"], "error": bool(r.is_error), "text": text})
        except Exception as e:
            out.append({"tool": c["tool"], "error": True, "text": str(getattr(e, "error", e))})
    return out


def sampled(text, model):
    """A sampling callback's answer: one assistant text message from `model`."""
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=text),
        model=model,
        stop_reason="endTurn",
    )


# --- the file-IPC approver (`--escalation dir:ESC`) seen from the person's side ---------------


def request_files(esc):
    """[(id, path)] of every request-<id>.json in `esc`, sorted by name."""
    out = []
    for path in sorted(glob.glob(os.path.join(esc, "request-*.json"))):
        out.append((os.path.basename(path)[len("request-") : -len(".json")], path))
    return out


def answered(esc, rid):
    return os.path.exists(os.path.join(esc, f"response-{rid}.json"))


def read_request(path):
    """The request's JSON, or None while it is not (or no longer) complete on disk."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def respond(esc, rid, body):
    """Writes response-<rid>.json the way a person's tool does: temporary file, then rename.
    `body` is a dict (written as JSON) or raw bytes (to send malformed answers). Returns the
    monotonic time just before the rename."""
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    tmp = os.path.join(esc, f".answer-{rid}.tmp")
    with open(tmp, "wb") as f:
        f.write(body)
    t = time.monotonic()
    os.rename(tmp, os.path.join(esc, f"response-{rid}.json"))
    return t


async def answer_next(esc, decision, deadline, poll):
    """Waits (up to `deadline` seconds) for the next unanswered request in `esc` and answers
    `decision`; returns (id, request, monotonic time of the answer)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        for rid, path in request_files(esc):
            if answered(esc, rid):
                continue
            request = read_request(path)
            if request is None:
                continue  # still being written
            return rid, request, respond(esc, rid, {"decision": decision})
        await anyio.sleep(poll)
    raise RuntimeError("no escalation request appeared")


def run_scenario(scenarios, session_kw=lambda scenario: {}):
    """The `DRIVER SCENARIO -- COMMAND ARGS...` main of the scenario drivers: runs
    `scenarios[SCENARIO](session)` in a session with COMMAND (ClientSession keywords from
    `session_kw(SCENARIO)`) and prints its report as one JSON document."""
    scenario = sys.argv[1]
    cmd = command_after_dashes()

    async def run():
        async with session(cmd, **session_kw(scenario)) as s:
            return await scenarios[scenario](s)

    print(json.dumps(anyio.run(run)))
