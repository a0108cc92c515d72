"""Drives `palisade serve --escalation dir:ESC_DIR` with the Python `mcp` SDK client for the
"approve and remember" tests (tests/remember.rs) and prints one JSON report. It plays the
person behind the file-IPC approver: every request file that appears while a call is in
flight is recorded and answered with the next planned decision (or `denied` when none is
planned, so an unexpected escalation shows up in the report instead of hanging the test).
It asserts nothing itself; the Rust test does.

usage: remember_drive.py SCENARIO -- COMMAND ARGS...
env: DRIVE_D, DRIVE_E (directories), ESC_DIR, PALISADE_BIN (for `palisade approve`)
"""

import os
import subprocess
import time

import anyio

import common
from common import call

DEADLINE = 60.0  # bound for one call; never a timing assertion


def answer(esc, rid, decision):
    """Writes the response the way a person's tool would (tmp + rename), or runs
    `palisade approve` for the `cli-*` decisions."""
    if decision == "cli-remember":
        out = subprocess.run(
            [os.environ["PALISADE_BIN"], "approve", "--dir", esc, "--all", "--remember"],
            capture_output=True, text=True, check=True,
        )
        return out.stdout
    body = {"decision": "approved", "remember": True} if decision == "remember" else {"decision": decision}
    common.respond(esc, rid, body)
    return None


async def watched_call(s, name, args, decisions=()):
    """Calls a tool while watching the approval directory; answers each request with the next
    of `decisions` (default `denied`) and reports the call's result and every request seen."""
    esc = os.environ["ESC_DIR"]
    plan = list(decisions)
    out = {"requests": []}
    seen = set()

    async def do_call():
        out["result"] = await call(s, name, args)

    async with anyio.create_task_group() as tg:
        tg.start_soon(do_call)
        deadline = time.monotonic() + DEADLINE
        while "result" not in out and time.monotonic() < deadline:
            for rid, path in common.request_files(esc):
                if rid in seen:
                    continue
                request = common.read_request(path)
                if request is None:
                    continue  # being renamed into place or already removed
                seen.add(rid)
                decision = plan.pop(0) if plan else "denied"
                cli = answer(esc, rid, decision)
                entry = {"request": request, "answered": decision}
                if cli is not None:
                    entry["cli_output"] = cli
                out["requests"].append(entry)
            await anyio.sleep(0.01)
    out["unused_decisions"] = plan
    return out


async def session(s):
    d, e = os.environ["DRIVE_D"], os.environ["DRIVE_E"]
    w = "fs__write_file"
    r = {}
    # 1. A write to D escalates; the person approves and remembers.
    r["first"] = await watched_call(s, w, {"path": f"{d}/one.txt", "content": "one"}, ["remember"])
    # 2. Same tool, same directory (and below it): approved by the scope, nobody asked.
    r["second"] = await watched_call(s, w, {"path": f"{d}/two.txt", "content": "two"})
    r["below"] = await watched_call(s, w, {"path": f"{d}/sub/three.txt", "content": "three"})
    # 3. A sibling directory escalates again (denied here).
    r["sibling"] = await watched_call(s, w, {"path": f"{e}/x.txt", "content": "x"})
    # 4. The same path with another tool escalates again (denied here).
    r["other_tool"] = await watched_call(
        s, "fs__edit_file",
        {"path": f"{d}/one.txt", "edits": [{"oldText": "one", "newText": "ONE"}]},
    )
    # 5. A deny is never overridden, even inside the remembered directory.
    r["denied_inside"] = await watched_call(s, w, {"path": f"{d}/locked/x.txt", "content": "x"})
    # 6. Escapes out of D through the proxy: a symlink in D pointing at E, and `..`.
    r["symlink"] = await watched_call(s, w, {"path": f"{d}/link/y.txt", "content": "y"})
    r["dotdot"] = await watched_call(s, w, {"path": f"{d}/../{os.path.basename(e)}/z.txt", "content": "z"})
    # 7. A plain approval (no remember) covers one call only.
    r["plain"] = await watched_call(s, w, {"path": f"{e}/plain.txt", "content": "p"}, ["approved"])
    r["plain_again"] = await watched_call(s, w, {"path": f"{e}/plain2.txt", "content": "p"})
    r["e_files"] = sorted(os.listdir(e))
    r["d_files"] = sorted(os.listdir(d))
    return r


async def fresh_session(s):
    """A new serve run remembers nothing; `palisade approve --all --remember` remembers."""
    d = os.environ["DRIVE_D"]
    w = "fs__write_file"
    r = {}
    r["again"] = await watched_call(s, w, {"path": f"{d}/again.txt", "content": "a"}, ["cli-remember"])
    r["after_cli"] = await watched_call(s, w, {"path": f"{d}/after.txt", "content": "b"})
    return r


ELICITED = []


async def on_elicit(context, params):
    """The person behind an elicitation-capable client: approves and remembers the first
    question, declines every later one; records what each question offered."""
    from mcp import types

    schema = params.requested_schema
    if hasattr(schema, "model_dump"):
        schema = schema.model_dump(by_alias=True, exclude_none=True)
    ELICITED.append({"message": params.message, "schema": schema})
    if len(ELICITED) == 1:
        return types.ElicitResult(action="accept", content={"approve": True, "remember": True})
    return types.ElicitResult(action="decline")


async def elicit_session(s):
    d, e = os.environ["DRIVE_D"], os.environ["DRIVE_E"]
    w = "fs__write_file"
    r = {}
    for key, path in (("first", f"{d}/e1.txt"), ("second", f"{d}/e2.txt"), ("sibling", f"{e}/e3.txt")):
        before = len(ELICITED)
        r[key] = {"result": await call(s, w, {"path": path, "content": key})}
        r[key]["elicited"] = ELICITED[before:]
    return r


if __name__ == "__main__":
    common.run_scenario(
        globals(),
        lambda scenario: {"elicitation_callback": on_elicit if scenario == "elicit_session" else None},
    )
