"""Drives `palisade serve` with the Python `mcp` SDK client for the roots tests
(tests/roots.rs) and prints one JSON report. It answers escalations as a person would through
the file-IPC approver (`--escalation dir:ESC_DIR`): waits for request-<id>.json, writes
response-<id>.json. It asserts nothing itself; the Rust test does.

usage: roots_drive.py SCENARIO -- COMMAND ARGS...
env: DRIVE_A, DRIVE_B, DRIVE_C (directories), ESC_DIR, DRIVE_BENCH_DIRS (bench: count)
"""

import glob
import os
import time

import anyio

import common
from common import call, text_of

DEADLINE = 60.0  # bound for "eventually" steps; never a timing assertion


async def answer_next(decision):
    """Waits for the next escalation request and answers it; returns (id, request, t_answer)."""
    return await common.answer_next(os.environ["ESC_DIR"], decision, DEADLINE, 0.005)


async def escalated_call(s, name, args, decision):
    """Calls a tool the policy escalates and answers the escalation; returns the result plus
    the seconds from the answer to the result (approval to forwarded call and back)."""
    out = {}

    async def do_call():
        out["result"] = await call(s, name, args)
        out["t_done"] = time.monotonic()

    async with anyio.create_task_group() as tg:
        tg.start_soon(do_call)
        rid, request, t_answer = await answer_next(decision)
        out["escalation"] = {"id": rid, "server": request.get("serverName")}
    out["answer_to_result_s"] = out["t_done"] - t_answer
    del out["t_done"]
    return out


def lines(text):
    return [l for l in text.splitlines() if l.startswith("/")]


def mount_points(mountinfo):
    """Mount points from /proc/self/mountinfo (field 5), octal escapes decoded."""
    out = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            out.append(fields[4].encode().decode("unicode_escape"))
    return out


async def widen(s):
    a, b, c = os.environ["DRIVE_A"], os.environ["DRIVE_B"], os.environ["DRIVE_C"]
    r = {}
    r["start"] = {
        "fs_dirs": lines(text_of(await s.call_tool("fs__list_allowed_directories", {}))),
        "probe_mounts": mount_points((await call(s, "probe__mountinfo", {}))["text"]),
        "probe_announced": (await call(s, "probe__announced", {}))["text"].splitlines(),
    }
    r["read_a"] = await call(s, "fs__read_text_file", {"path": f"{a}/a.txt"})
    # Denied: B stays out of the server's roots and out of its sandbox.
    r["b_denied"] = await escalated_call(s, "probe__read_text", {"path": f"{b}/b.txt"}, "denied")
    r["after_denial"] = {
        "probe_peek_b": await call(s, "probe__peek", {"what": f"peek:{b}/b.txt"}),
        "probe_peek_a": await call(s, "probe__peek", {"what": f"peek:{a}/a.txt"}),
        "probe_mounts": mount_points((await call(s, "probe__mountinfo", {}))["text"]),
    }
    # Approved: B is mounted, announced and readable.
    r["b_approved"] = await escalated_call(s, "fs__read_text_file", {"path": f"{b}/b.txt"}, "approved")
    r["fs_dirs_after"] = lines(text_of(await s.call_tool("fs__list_allowed_directories", {})))
    # Decided again, approved again: no second relaunch (the Rust test counts relaunches).
    r["b_again"] = await escalated_call(s, "fs__read_text_file", {"path": f"{b}/b.txt"}, "approved")
    r["probe_b_approved"] = await escalated_call(s, "probe__read_text", {"path": f"{b}/b.txt"}, "approved")
    r["probe_after"] = {
        "mounts": mount_points((await call(s, "probe__mountinfo", {}))["text"]),
        "announced": (await call(s, "probe__announced", {}))["text"].splitlines(),
        "peek_b": await call(s, "probe__peek", {"what": f"peek:{b}/b.txt"}),
    }
    # Escapes through the proxy: a symlink planted in A pointing at C, and `..`.
    r["symlink_write"] = await call(s, "fs__write_file", {"path": f"{a}/link/x.txt", "content": "x"})
    r["dotdot_write"] = await call(s, "fs__write_file", {"path": f"{a}/../{os.path.basename(c)}/y.txt", "content": "y"})
    sandbox = os.path.join(os.path.dirname(a), "sandbox")
    r["write_sandbox"] = await call(s, "fs__write_file", {"path": f"{sandbox}/ok.txt", "content": "ok"})
    r["c_files"] = sorted(os.listdir(c))
    return r


AGENT_ROOTS = []


async def agent_list_roots(context):
    from mcp import types

    return types.ListRootsResult(roots=[types.Root(uri=f"file://{p}") for p in AGENT_ROOTS])


async def agent_roots(s):
    """The client declares roots [A]: B is refused before the policy is asked (no escalation
    request appears); after it adds B and says list_changed, B reaches the policy (escalated,
    denied here) and the server's own roots did not grow."""
    a, b = os.environ["DRIVE_A"], os.environ["DRIVE_B"]
    esc = os.environ["ESC_DIR"]
    sandbox = os.path.join(os.path.dirname(a), "sandbox")
    r = {"read_a": await call(s, "fs__read_text_file", {"path": f"{a}/a.txt"})}
    r["read_b"] = await call(s, "fs__read_text_file", {"path": f"{b}/b.txt"})
    r["requests_after_b"] = sorted(os.listdir(esc))
    r["write_sandbox"] = await call(s, "fs__write_file", {"path": f"{sandbox}/agent.txt", "content": "ok"})
    AGENT_ROOTS.append(b)
    await s.send_roots_list_changed()
    # palisade re-asks on its own task (a documented ordering gap): poll, bounded.
    deadline = time.monotonic() + DEADLINE
    while True:
        r["read_b_after"] = await escalated_call(s, "fs__read_text_file", {"path": f"{b}/b.txt"}, "denied") \
            if await policy_reached(s, b) else None
        if r["read_b_after"] is not None or time.monotonic() > deadline:
            break
        await anyio.sleep(0.05)
    r["fs_dirs"] = lines(text_of(await s.call_tool("fs__list_allowed_directories", {})))
    return r


async def policy_reached(s, b):
    """True once a path in B is no longer refused by the agent-roots check (probed with
    get_file_info, which the test policy escalates too, so it is answered as denied)."""
    out = {}

    async def probe():
        out["r"] = await call(s, "fs__get_file_info", {"path": f"{b}/b.txt"})

    async with anyio.create_task_group() as tg:
        tg.start_soon(probe)
        # Either the call returns at once (refused by the agent roots) or it escalates.
        with anyio.move_on_after(DEADLINE):
            while "r" not in out:
                reqs = glob.glob(os.path.join(os.environ["ESC_DIR"], "request-*.json"))
                if reqs:
                    await answer_next("denied")
                    break
                await anyio.sleep(0.01)
    return "outside the roots your MCP client declared" not in out["r"]["text"]


async def bench(s):
    """Approval-to-result times for N fresh directories (one relaunch each) on both fs
    servers, and for a second approval in an already-granted directory (no relaunch)."""
    n = int(os.environ.get("DRIVE_BENCH_DIRS", "20"))
    base = os.environ["DRIVE_B"]
    out = {}
    for server, tool in (("fs", "read_text_file"), ("pfs", "read")):
        fresh, again = [], []
        for i in range(n):
            d = os.path.join(base, f"{server}-{i}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "f.txt"), "w") as f:
                f.write("x")
            r = await escalated_call(s, f"{server}__{tool}", {"path": f"{d}/f.txt"}, "approved")
            if r["result"].get("is_error"):
                out.setdefault("errors", []).append(r["result"])
            fresh.append(r["answer_to_result_s"])
            r = await escalated_call(s, f"{server}__{tool}", {"path": f"{d}/f.txt"}, "approved")
            again.append(r["answer_to_result_s"])
        out[server] = {"fresh": fresh, "again": again}
    return out


def session_kw(scenario):
    if scenario == "agent_roots":
        AGENT_ROOTS.append(os.environ["DRIVE_A"])
        return {"list_roots_callback": agent_list_roots}
    return {"list_roots_callback": None}


if __name__ == "__main__":
    common.run_scenario(globals(), session_kw)
