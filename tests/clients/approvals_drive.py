"""Drives `palisade serve` with the Python `mcp` SDK client for the approval tests
(tests/approvals/) and prints one JSON report. It plays every human the approvers can ask:
the person answering file-IPC requests (or running `palisade approve` in a second terminal),
the person at the terminal (through a pseudo-terminal it owns), and the person behind an MCP
client that answers elicitation. It asserts nothing itself; the Rust test does.

usage: approvals_drive.py SCENARIO -- COMMAND ARGS...
env: WORK (the directory the policy escalates writes in), ESC_DIR (dir: approver),
     PALISADE_BIN (for `palisade approve`), SECRET (a secret-looking value to write),
     ELICIT_ANSWERS (comma-separated: accept_yes, accept_no, decline, cancel, error),
     TTY_ANSWERS (JSON list of lines typed at the terminal), STDOUT_COPY (tty scenario: where
     palisade's stdout is copied), DRIVE_ERRLOG (palisade's stderr).

Scenarios: plain, dir_ipc, timeout, approve_cmd, cancel, tty, tty_cancel, elicit, exec_chain, ordering,
hostile_tty, hostile_dir, widen_exact, swap_while_asked.
"""

import json
import os
import select
import sys
import time
import uuid

import anyio
from mcp import types

import common
from common import call, command_after_dashes, request_files

# Bound for "eventually" steps (a missed request, a hung call); never a timing assertion.
DEADLINE = 60.0
HERE = os.path.dirname(os.path.abspath(__file__))


def work(name):
    return os.path.join(os.environ["WORK"], name)


def write_args(name, content=None):
    return {"path": work(name), "content": content if content is not None else f"written: {name}"}


def esc_dir():
    return os.environ["ESC_DIR"]


def listing():
    return sorted(os.listdir(esc_dir()))


def pending_requests():
    """Request files that have no response yet: {id: path}."""
    return {rid: path for rid, path in request_files(esc_dir()) if not common.answered(esc_dir(), rid)}


async def wait_requests(n, seen=()):
    """Waits until `n` request files not in `seen` are pending; returns [(id, path, request,
    mode)] as read from disk."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        found = []
        for rid, path in sorted(pending_requests().items()):
            if rid in seen:
                continue
            try:
                with open(path) as f:
                    request = json.load(f)
                mode = os.stat(path).st_mode & 0o777
            except (OSError, ValueError):
                continue  # a partial file would be a bug; the test checks atomicity itself
            found.append((rid, path, request, mode))
        if len(found) >= n:
            return found[:n]
        await anyio.sleep(0.005)
    raise RuntimeError(f"{n} escalation request(s) did not appear in {esc_dir()}: {listing()}")


def respond(rid, body: bytes):
    """Writes response-<rid>.json the way IronCurtain's tools do: temporary file, rename."""
    common.respond(esc_dir(), rid, body)


APPROVED = b'{"decision": "approved"}'
DENIED = b'{"decision": "denied"}'


def start_call(tg, s, name, args):
    """Starts a tool call in the task group; returns a box that gets `result` and `done`."""
    box = {"done": False}

    async def run():
        box["result"] = await call(s, name, args)
        box["done"] = True

    tg.start_soon(run)
    return box


async def wait_done(box):
    deadline = time.monotonic() + DEADLINE
    while not box["done"]:
        if time.monotonic() > deadline:
            raise RuntimeError("a call did not complete")
        await anyio.sleep(0.005)
    return box["result"]


# --- scenarios -------------------------------------------------------------------------------


async def plain(s, ctx):
    """One escalated write and one allowed read, nobody answers anything."""
    with open(work("hello.txt"), "w") as f:
        f.write("hello")
    return {
        "write": await call(s, "fs__write", write_args("plain.txt")),
        "read": await call(s, "fs__read", {"path": work("hello.txt")}),
        "written": os.path.exists(work("plain.txt")),
    }


async def dir_ipc(s, ctx):
    """File IPC: approved, denied, and two malformed responses, one escalation each."""
    out = {}
    answers = [
        ("approved", APPROVED),
        ("denied", DENIED),
        ("malformed_decision", b'{"decision": "yes please"}'),
        ("not_json", b"approved"),
    ]
    async with anyio.create_task_group() as tg:
        for label, body in answers:
            box = start_call(tg, s, "fs__write", write_args(f"{label}.txt", os.environ.get("SECRET")))
            [(rid, path, request, mode)] = await wait_requests(1)
            entry = {
                "request": request,
                "request_file": os.path.basename(path),
                "mode": mode,
                "pending_while_unanswered": not box["done"],
            }
            respond(rid, body)
            entry["result"] = await wait_done(box)
            entry["listing_after"] = listing()
            entry["written"] = os.path.exists(work(f"{label}.txt"))
            out[label] = entry
    return out


async def timeout(s, ctx):
    """Nobody answers the real request; a response for an id nobody asked about appears."""
    unknown = str(uuid.uuid4())
    async with anyio.create_task_group() as tg:
        box = start_call(tg, s, "fs__write", write_args("timeout.txt"))
        [(rid, _, _, _)] = await wait_requests(1)
        respond(unknown, APPROVED)
        out = {"real_id": rid, "unknown_id": unknown, "listing_with_unknown": listing()}
        out["result"] = await wait_done(box)
    out["listing_after"] = listing()
    out["written"] = os.path.exists(work("timeout.txt"))
    return out


async def approve_tool(*args):
    p = await anyio.run_process(
        [os.environ["PALISADE_BIN"], "approve", "--dir", esc_dir(), *args], check=False
    )
    return {"code": p.returncode, "stdout": p.stdout.decode(), "stderr": p.stderr.decode()}


async def approve_cmd(s, ctx):
    """`palisade approve` run from another process, as from a second terminal."""
    out = {"empty": await approve_tool("--list")}
    async with anyio.create_task_group() as tg:
        a = start_call(tg, s, "fs__write", write_args("by-approve-all.txt", os.environ["SECRET"]))
        [(rid_a, _, _, _)] = await wait_requests(1)
        out["listed"] = await approve_tool("--list")
        out["a_pending_after_list"] = not a["done"]
        out["all"] = await approve_tool("--all")
        out["a"] = await wait_done(a)
        b = start_call(tg, s, "fs__write", write_args("by-deny-all.txt"))
        [(rid_b, _, _, _)] = await wait_requests(1, seen={rid_a})
        out["deny_all"] = await approve_tool("--deny-all")
        out["b"] = await wait_done(b)
    out["ids"] = [rid_a, rid_b]
    out["a_written"] = os.path.exists(work("by-approve-all.txt"))
    out["b_written"] = os.path.exists(work("by-deny-all.txt"))
    out["listing_after"] = listing()
    return out


async def cancel(s, ctx):
    """The agent gives up on an escalated call while the question is pending."""
    with open(work("cancel-check.txt"), "w") as f:
        f.write("still serving")
    out = {}
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            box = start_call(tg, s, "fs__write", write_args("cancelled.txt"))
            [(rid, path, _, _)] = await wait_requests(1)
            out["pending_before_cancel"] = not box["done"]
            scope.cancel()  # the SDK sends notifications/cancelled for the call
    deadline = time.monotonic() + DEADLINE
    while os.path.exists(path) and time.monotonic() < deadline:
        await anyio.sleep(0.01)
    out["request_withdrawn"] = not os.path.exists(path)
    out["listing_after"] = listing()
    # Approving now must not let the cancelled call through.
    respond(rid, APPROVED)
    out["after"] = await call(s, "fs__read", {"path": work("cancel-check.txt")})
    out["written"] = os.path.exists(work("cancelled.txt"))
    return out


def read_until(fd, marker: bytes):
    """Reads the pty master until `marker` has been printed; returns everything read."""
    seen = b""
    deadline = time.monotonic() + DEADLINE
    while marker not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"the terminal never showed {marker!r}: {seen!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            seen += os.read(fd, 4096)
    return seen


async def tty(s, ctx):
    """The person at the terminal: one escalation per line in TTY_ANSWERS."""
    master = ctx["master"]
    out = []
    async with anyio.create_task_group() as tg:
        for i, line in enumerate(json.loads(os.environ["TTY_ANSWERS"])):
            name = f"tty-{i}.txt"
            box = start_call(tg, s, "fs__write", write_args(name, os.environ["SECRET"]))
            shown = await anyio.to_thread.run_sync(read_until, master, b"[y/N]")
            pending = not box["done"]
            os.write(master, line.encode() + b"\n")
            result = await wait_done(box)
            out.append(
                {
                    "typed": line,
                    "shown": shown.decode(errors="replace"),
                    "pending_while_asked": pending,
                    "result": result,
                    "written": os.path.exists(work(name)),
                }
            )
    return out


async def tty_cancel(s, ctx):
    """The agent cancels a call whose question is on the terminal; a late `y` typed for it
    must not answer the next question."""
    master = ctx["master"]
    out = {}
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            start_call(tg, s, "fs__write", write_args("tty-cancelled.txt"))
            await anyio.to_thread.run_sync(read_until, master, b"[y/N]")
            scope.cancel()
    out["withdrawn"] = (await anyio.to_thread.run_sync(read_until, master, b"withdrawn")).decode(
        errors="replace"
    )
    os.write(master, b"y\n")  # too late: typed after the question went away
    for name, line in (("tty-next.txt", b"n\n"), ("tty-last.txt", b"y\n")):
        async with anyio.create_task_group() as tg:
            box = start_call(tg, s, "fs__write", write_args(name))
            await anyio.to_thread.run_sync(read_until, master, b"[y/N]")
            os.write(master, line)
            out[name] = await wait_done(box)
    for name in ("tty-cancelled.txt", "tty-next.txt", "tty-last.txt"):
        out[name + ":written"] = os.path.exists(work(name))
    return out


# A file name an agent may choose: moves the cursor up two lines and erases it (ESC[2A ESC[2K),
# the same with the one-byte C1 CSI, then a right-to-left override.
HOSTILE_NAME = "evil\x1b[2A\x1b[2K\u009b1A\u202etxt.exe"


async def hostile_tty(s, ctx):
    """An escalated write whose path and content carry terminal escapes; the person says no."""
    master = ctx["master"]
    async with anyio.create_task_group() as tg:
        box = start_call(tg, s, "fs__write", write_args(HOSTILE_NAME, HOSTILE_NAME))
        shown = await anyio.to_thread.run_sync(read_until, master, b"[y/N]")
        os.write(master, b"n\n")
        result = await wait_done(box)
    return {"shown": shown.decode(errors="replace"), "result": result}


async def hostile_dir(s, ctx):
    """The same call through file IPC, shown by `palisade approve --list`, then denied."""
    async with anyio.create_task_group() as tg:
        box = start_call(tg, s, "fs__write", write_args(HOSTILE_NAME, HOSTILE_NAME))
        [(_, _, request, _)] = await wait_requests(1)
        out = {"request": request, "listed": await approve_tool("--list")}
        out["asked"] = await approve_tool("--deny-all")
        out["result"] = await wait_done(box)
    return out


async def call_approving(s, name, args):
    """Makes a call; if it asks a person, approves (as a person who trusts the agent would).
    Returns the result, the request shown (or None when nobody was asked)."""
    async with anyio.create_task_group() as tg:
        box = start_call(tg, s, name, args)
        deadline = time.monotonic() + DEADLINE
        request = None
        while not box["done"] and time.monotonic() < deadline:
            pending = pending_requests()
            if pending:
                [(rid, path)] = list(pending.items())
                with open(path) as f:
                    request = json.load(f)
                respond(rid, APPROVED)
                break
            await anyio.sleep(0.005)
        result = await wait_done(box)
    return {"result": result, "request": request}


async def widen_exact(s, ctx):
    """HOME holds .config: approve a note in a new .config/notes-app, then try .config itself
    and a user service."""
    home = os.environ["HOME"]
    out = {}
    for label, rel in (
        ("note", ".config/notes-app/today.md"),
        ("config", ".config/evil.conf"),
        ("service", ".config/systemd/user/evil.service"),
    ):
        path = os.path.join(home, rel)
        out[label] = await call_approving(s, "fs__write", {"path": path, "content": "[Service]"})
        out[label]["written"] = os.path.exists(path)
    return out


async def swap_while_asked(s, ctx):
    """Two writes through symlinks in WORK, each approved by a person: `shown-link` stays
    where it pointed when the person was asked; `swapped-link` is repointed at SWAP_TO (as a
    server that can write WORK would) while the person decides."""
    out = {}
    for label in ("shown", "swapped"):
        link = work(f"{label}-link")
        async with anyio.create_task_group() as tg:
            box = start_call(tg, s, "fs__write", {"path": os.path.join(link, "f"), "content": label})
            [(rid, _, request, _)] = await wait_requests(1)
            if label == "swapped":
                os.remove(link)
                os.symlink(os.environ["SWAP_TO"], link)
            respond(rid, APPROVED)
            out[label] = {"request": request, "result": await wait_done(box)}
    return out


async def elicit(s, ctx):
    """One escalation per answer in ELICIT_ANSWERS, answered by the elicitation callback."""
    out = []
    for i, answer in enumerate(ctx["answers"]):
        name = f"elicit-{i}.txt"
        asked_before = len(ctx["asked"])
        result = await call(s, "fs__write", write_args(name, os.environ.get("SECRET")))
        out.append(
            {
                "answer": answer,
                "asked": ctx["asked"][asked_before:],
                "result": result,
                "written": os.path.exists(work(name)),
            }
        )
    return out


async def exec_chain(s, ctx):
    """`exec:CMD,dir:PATH`: the program approves what it recognises and passes the rest on."""
    out = {"by_program": await call(s, "fs__write", write_args("by-program.txt", "approve-me"))}
    out["listing_after_program"] = listing()
    async with anyio.create_task_group() as tg:
        for label, body in (("human_approves", APPROVED), ("human_denies", DENIED)):
            box = start_call(tg, s, "fs__write", write_args(f"{label}.txt", "ask a human"))
            [(rid, _, request, _)] = await wait_requests(1)
            respond(rid, body)
            out[label] = {"request": request, "result": await wait_done(box)}
    for name in ("by-program", "human_approves", "human_denies"):
        out[f"{name}_written"] = os.path.exists(work(f"{name}.txt"))
    return out


async def ordering(s, ctx):
    """A slow escalation does not hold up an allowed call; two escalations are independent."""
    with open(work("hello.txt"), "w") as f:
        f.write("hello")
    ev = []
    out = {"events": ev}
    async with anyio.create_task_group() as tg:
        a = start_call(tg, s, "fs__write", write_args("a.txt"))
        [(rid_a, path_a, _, _)] = await wait_requests(1)
        ev.append("a:requested")
        b = await call(s, "fs__read", {"path": work("hello.txt")})
        ev.append("b:done")
        # The state of A at the moment B's answer arrived.
        out["b"] = b
        out["at_b_done"] = {
            "a_done": a["done"],
            "a_request_exists": os.path.exists(path_a),
            "a_answered": os.path.exists(os.path.join(esc_dir(), f"response-{rid_a}.json")),
        }
        # A second escalation while A still waits; answered first.
        c = start_call(tg, s, "fs__write", write_args("c.txt"))
        [(rid_c, _, _, _)] = await wait_requests(1, seen={rid_a})
        ev.append("c:requested")
        respond(rid_c, APPROVED)
        out["c"] = await wait_done(c)
        ev.append("c:done")
        out["at_c_done"] = {"a_done": a["done"], "a_request_exists": os.path.exists(path_a)}
        respond(rid_a, APPROVED)
        ev.append("a:answered")
        out["a"] = await wait_done(a)
        ev.append("a:done")
    out["a_written"] = os.path.exists(work("a.txt"))
    out["c_written"] = os.path.exists(work("c.txt"))
    out["listing_after"] = listing()
    return out


# --- the client ------------------------------------------------------------------------------


def elicitation_callback(ctx):
    """A client whose user answers each `elicitation/create` from ctx["answers"] in turn."""
    queue = list(ctx["answers"])

    async def on_elicit(_context, params):
        ctx["asked"].append(
            {
                "message": params.message,
                "schema": getattr(params, "requested_schema", None),
                "mode": getattr(params, "mode", None),
            }
        )
        answer = queue.pop(0) if queue else "cancel"
        if answer == "accept_yes":
            return types.ElicitResult(action="accept", content={"approve": True})
        if answer == "accept_no":
            return types.ElicitResult(action="accept", content={"approve": False})
        if answer == "decline":
            return types.ElicitResult(action="decline")
        if answer == "error":
            return types.ErrorData(code=types.INTERNAL_ERROR, message="the client's form broke")
        return types.ElicitResult(action="cancel")

    return on_elicit


async def main_async(scenario, cmd):
    ctx = {"asked": []}
    answers = os.environ.get("ELICIT_ANSWERS")
    if scenario in ("tty", "tty_cancel", "hostile_tty"):
        # A pseudo-terminal we own; palisade gets its slave as controlling terminal.
        master, slave = os.openpty()
        ctx["master"] = master
        launcher = [sys.executable, os.path.join(HERE, "ctty_exec.py")]
        cmd = launcher + [os.ttyname(slave), os.environ["STDOUT_COPY"], "--"] + cmd
    # stdio_client starts the command in a new session (start_new_session): without the
    # launcher above, palisade has no controlling terminal at all.
    callback = None
    if answers is not None:
        ctx["answers"] = [a for a in answers.split(",") if a]
        callback = elicitation_callback(ctx)
    async with common.session(cmd, elicitation_callback=callback) as s:
        tools = [t.name for t in (await s.list_tools()).tools]
        report = await globals()[scenario](s, ctx)
        return {"tools": tools, "report": report}


def main():
    print(json.dumps(anyio.run(main_async, sys.argv[1], command_after_dashes())))


if __name__ == "__main__":
    main()
