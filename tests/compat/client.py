"""Compatibility client: drives one real MCP server through `palisade serve` with the Python
`mcp` SDK and prints one JSON report on stdout for tests/compat/.

usage: client.py SCENARIO PARAMS_JSON -- COMMAND ARGS...

Each scenario runs its checks and reports, per check, {"name", "pass", "detail"} (and
"gap", informational only: whether a failed check is excused is decided in one place,
`KNOWN_GAPS` in tests/compat/servers.rs). Some checks look at the server's process from outside
its sandbox: it is a descendant of this client (client -> palisade serve -> bwrap -> server).
The tool names are the gateway's (`SERVER__tool`); PARAMS_JSON carries the server's prefix,
the granted directories and the paths that must stay out of reach.
"""

import json
import os
import subprocess
import sys
import time

import anyio
from mcp import types
from mcp.shared.exceptions import MCPError

# The shared driver helpers live next to the other clients, in tests/clients/common.py.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients"))
import common  # noqa: E402

DEADLINE = 30.0  # bound for "eventually" steps; never a timing assertion


class Report:
    def __init__(self):
        self.checks = []

    def check(self, name, ok, detail="", gap=False):
        self.checks.append({"name": name, "pass": bool(ok), "detail": str(detail)[:300], "gap": gap})


class Recorder:
    def __init__(self):
        self.methods = []

    async def __call__(self, message):
        method = getattr(message, "method", None)
        if method is None and hasattr(message, "root"):
            method = getattr(message.root, "method", None)
        self.methods.append(method or type(message).__name__)


# What reached this client's sampling and elicitation callbacks (server-everything's relay
# checks assert on it).
RELAYED = {"sampling": [], "elicitation": []}


async def sampling_callback(context, params):
    RELAYED["sampling"].append(" ".join(getattr(m.content, "text", "") for m in params.messages))
    return common.sampled("sampled-by-compat-client", "compat-model")


async def elicitation_callback(context, params):
    RELAYED["elicitation"].append(params.message)
    return types.ElicitResult(action="accept", content={"name": "elicited-by-compat-client"})


async def session(cmd, body, **kw):
    rec = Recorder()
    async with common.session(cmd, "COMPAT_ERRLOG", message_handler=rec, **kw) as s:
        return await body(s, rec)


async def call(s, name, args, **kw):
    """{"ok": no JSON-RPC error, "is_error": result.isError, "text": ...}"""
    r = await common.call(s, name, args, **kw)
    if not r["ok"]:
        return {"ok": False, "is_error": True, "text": r["text"]}
    return r


def succeeded(r):
    return r["ok"] and not r["is_error"]


async def tools_check(s, rep, prefix, must):
    names = [t.name for t in (await s.list_tools()).tools]
    mine = [n for n in names if n.startswith(prefix + "__")]
    missing = [m for m in must if f"{prefix}__{m}" not in mine]
    rep.check("tools listed", not missing and mine, f"{len(mine)} tools; missing {missing}")
    return mine


def refused(rep, name, r, secret=None):
    leaked = secret is not None and secret in r["text"]
    rep.check(name, (not succeeded(r)) and not leaked, r["text"][:200])


def descendants(root_pid):
    """Pids of every live process below root_pid (from /proc, as the host sees them)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # exited meanwhile
        # The command name is in parentheses and may hold spaces: the ppid follows the last ")".
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, queue = [], [root_pid]
    while queue:
        for child in children.get(queue.pop(), []):
            out.append(child)
            queue.append(child)
    return out


def server_processes(comm, marker):
    """Processes below this client whose name is `comm` and whose argv holds `marker`: the
    real server inside its sandbox (bwrap's own argv also names the script, its name does not
    match), with their argv."""
    found = []
    for pid in descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if name == comm and any(marker in a for a in argv):
            found.append((pid, argv))
    return found


# ---------------------------------------------------------------- server-filesystem
async def filesystem(s, rec, p, rep):
    x = p["prefix"]
    await tools_check(s, rep, x, ["read_text_file", "write_file", "list_directory", "list_allowed_directories",
                                  "edit_file", "move_file", "search_files", "get_file_info"])
    r = await call(s, f"{x}__list_allowed_directories", {})
    rep.check("roots tool shows the grant", succeeded(r) and p["granted"] in r["text"], r["text"])
    if "roots_in_argv" in p:
        # The config passes no directory: the profile's rootsAs put the server's roots on its
        # command line (its own grant first, the session sandbox dir last).
        procs = server_processes("node", "server-filesystem")
        argv = procs[0][1] if len(procs) == 1 else []
        want = p["roots_in_argv"]
        tail = argv[-len(want):] if argv else []
        rep.check("roots become its arguments (rootsAs)", tail == want,
                  f"{len(procs)} server process(es); argv tail {tail}, want {want}")
    target = os.path.join(p["granted"], "written.txt")
    r = await call(s, f"{x}__write_file", {"path": target, "content": "written through palisade"})
    on_host = open(target).read() if os.path.exists(target) else None
    rep.check("write in granted dir", succeeded(r) and on_host == "written through palisade", r["text"])
    r = await call(s, f"{x}__read_text_file", {"path": os.path.join(p["granted"], "hello.txt")})
    rep.check("read in granted dir", succeeded(r) and "hello from the host" in r["text"], r["text"])
    r = await call(s, f"{x}__read_text_file", {"path": p["secret_file"]})
    refused(rep, "read outside grants refused", r, p["secret_text"])


async def answer_next_escalation(esc_dir, decision):
    """Waits for the next file-IPC escalation request in esc_dir and answers it."""
    rid, _, _ = await common.answer_next(esc_dir, decision, DEADLINE, 0.02)
    return rid


async def filesystem_widen(s, rec, p, rep):
    """server-filesystem with no directory in its config: after a person approves a read in
    another directory, the relaunched server has that directory on its command line too."""
    x = p["prefix"]
    before = server_processes("node", "server-filesystem")
    argv = before[0][1] if len(before) == 1 else []
    rep.check("before: roots as arguments, session dir last",
              argv[-2:] == [p["granted"], p["sandbox"]] and p["other_dir"] not in argv, f"argv tail {argv[-3:]}")
    out = {}

    async def read_other():
        out["r"] = await call(s, f"{x}__read_text_file", {"path": p["other_file"]})

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_other)
        await answer_next_escalation(p["esc"], "approved")
    r = out["r"]
    rep.check("approved read in another dir", succeeded(r) and "other text" in r["text"], r["text"])
    after = server_processes("node", "server-filesystem")
    argv2 = after[0][1] if len(after) == 1 else []
    new_pid = len(after) == 1 and len(before) == 1 and after[0][0] != before[0][0]
    rep.check("after widening: relaunched, new root in argv",
              new_pid and argv2[-3:] == [p["granted"], p["other_dir"], p["sandbox"]],
              f"new process: {new_pid}; argv tail {argv2[-3:]}")
    r = await call(s, f"{x}__list_allowed_directories", {})
    rep.check("after widening: roots tool agrees", succeeded(r) and p["other_dir"] in r["text"], r["text"])


# ---------------------------------------------------------------- palisade fs-server
async def fs_server(s, rec, p, rep):
    x = p["prefix"]
    await tools_check(s, rep, x, ["read", "write", "list", "stat", "search", "list_roots"])
    r = await call(s, f"{x}__list_roots", {})
    rep.check("roots tool shows the grant", succeeded(r) and p["granted"] in r["text"], r["text"])
    target = os.path.join(p["granted"], "written.txt")
    r = await call(s, f"{x}__write", {"path": target, "content": "fs-server wrote this"})
    on_host = open(target).read() if os.path.exists(target) else None
    rep.check("write in granted dir", succeeded(r) and on_host == "fs-server wrote this", r["text"])
    r = await call(s, f"{x}__read", {"path": os.path.join(p["granted"], "hello.txt")})
    rep.check("read in granted dir", succeeded(r) and "hello from the host" in r["text"], r["text"])
    r = await call(s, f"{x}__read", {"path": p["secret_file"]})
    refused(rep, "read outside grants refused", r, p["secret_text"])


# ---------------------------------------------------------------- server-everything
async def everything(s, rec, p, rep):
    x = p["prefix"]
    await tools_check(s, rep, x, ["echo", "get-sum", "get-env", "trigger-long-running-operation",
                                  "toggle-simulated-logging"])
    r = await call(s, f"{x}__echo", {"message": "compat"})
    rep.check("call (echo)", succeeded(r) and "compat" in r["text"], r["text"])

    seen = []

    async def on_progress(pr, total, message):
        seen.append(pr)

    r = await call(s, f"{x}__trigger-long-running-operation", {"duration": 1, "steps": 3},
                   progress_callback=on_progress)
    rep.check("progress passes through", succeeded(r) and len(seen) >= 1, f"{len(seen)} progress notifications")

    await s.set_logging_level("debug")
    r = await call(s, f"{x}__toggle-simulated-logging", {})
    deadline = time.monotonic() + DEADLINE
    while "notifications/message" not in rec.methods and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    rep.check("logging passes through", "notifications/message" in rec.methods, r["text"])

    res = (await s.list_resources()).resources
    read_ok, detail = False, "no resources"
    if res:
        try:
            rr = await s.read_resource(res[0].uri)
            read_ok, detail = len(rr.contents) > 0, f"{len(res)} resources; read {res[0].uri}"
        except MCPError as e:
            detail = e.message
    rep.check("resources list and read", read_ok, detail)

    prompts = [pp.name for pp in (await s.list_prompts()).prompts]
    simple = next((n for n in prompts if n.endswith("simple-prompt")), None)
    got_ok, detail = False, f"prompts {prompts}"
    if simple:
        try:
            g = await s.get_prompt(simple)
            got_ok, detail = len(g.messages) > 0, f"{len(prompts)} prompts; got {simple}"
        except MCPError as e:
            detail = e.message
    rep.check("prompts list and get", got_ok, detail)

    r = await call(s, f"{x}__get-roots-list", {})
    rep.check("roots pass through", succeeded(r) and p["granted"] in r["text"], r["text"])

    r = await call(s, f"{x}__get-env", {})
    rep.check("host env not leaked", succeeded(r) and p["env_secret"] not in r["text"], "secret absent" if p["env_secret"] not in r["text"] else "LEAKED")

    # Sampling and elicitation are relayed because the config sets "relay" for this server
    # (off by default); server-everything lists its trigger tools only when they are declared.
    names = [t.name for t in (await s.list_tools()).tools]
    if f"{x}__trigger-sampling-request" in names:
        before = len(RELAYED["sampling"])
        r = {"ok": False, "is_error": True, "text": "no answer within the deadline"}
        with anyio.move_on_after(DEADLINE):
            r = await call(s, f"{x}__trigger-sampling-request", {"prompt": "compat-sampling", "maxTokens": 5})
        reached = any("compat-sampling" in t for t in RELAYED["sampling"][before:])
        rep.check("sampling request reaches the client", reached and succeeded(r) and "sampled-by-compat-client" in r["text"],
                  f"callback invoked: {reached}; {r['text']}")
    else:
        rep.check("sampling request reaches the client", False,
                  "trigger-sampling-request not listed: the gateway does not declare sampling downstream")
    if f"{x}__trigger-elicitation-request" in names:
        before = len(RELAYED["elicitation"])
        r = {"ok": False, "is_error": True, "text": "no answer within the deadline"}
        with anyio.move_on_after(DEADLINE):
            r = await call(s, f"{x}__trigger-elicitation-request", {})
        asked = RELAYED["elicitation"][before:]
        attributed = any(m.startswith(f'[MCP server "{x}"') for m in asked)
        rep.check("elicitation reaches the client, attributed",
                  attributed and succeeded(r) and "elicited-by-compat-client" in r["text"],
                  f"asked: {asked[:1]}; {r['text'][:150]}")
    else:
        rep.check("elicitation reaches the client, attributed", False,
                  "trigger-elicitation-request not listed: the gateway does not declare elicitation downstream")


# ---------------------------------------------------------------- server-memory
async def memory_write(s, rec, p, rep):
    x = p["prefix"]
    await tools_check(s, rep, x, ["create_entities", "read_graph", "add_observations", "search_nodes",
                                  "delete_entities", "create_relations"])
    r = await call(s, f"{x}__create_entities",
                   {"entities": [{"name": "palisade-compat", "entityType": "test", "observations": ["kept"]}]})
    rep.check("create entity", succeeded(r), r["text"])


async def memory_restart(s, rec, p, rep):
    """Create, kill the server's process inside its sandbox, let the gateway's supervisor
    restart it, read back: the graph lives in the state dir, not in the process."""
    x = p["prefix"]
    await tools_check(s, rep, x, ["create_entities", "read_graph"])
    r = await call(s, f"{x}__create_entities",
                   {"entities": [{"name": "palisade-restart", "entityType": "test", "observations": ["kept"]}]})
    rep.check("create entity", succeeded(r), r["text"])
    before = server_processes("node", "server-memory")
    rep.check("server process found inside its sandbox", len(before) == 1,
              f"{[pid for pid, _ in before]}")
    if len(before) != 1:
        return
    old_pid = before[0][0]
    os.kill(old_pid, 9)
    deadline = time.monotonic() + DEADLINE
    r, after = {"ok": False, "is_error": True, "text": "not tried"}, []
    while time.monotonic() < deadline:
        after = [pid for pid, _ in server_processes("node", "server-memory") if pid != old_pid]
        if after:
            r = await call(s, f"{x}__read_graph", {})
            if succeeded(r):
                break
        await anyio.sleep(0.2)
    rep.check("restarted as a new process", bool(after) and old_pid not in after,
              f"killed {old_pid}; now {after}")
    rep.check("entity survives a restart in the session", succeeded(r) and "palisade-restart" in r["text"],
              r["text"])


async def memory_read(s, rec, p, rep):
    x = p["prefix"]
    r = await call(s, f"{x}__read_graph", {})
    rep.check("entity survives a new gateway session", succeeded(r) and "palisade-compat" in r["text"], r["text"])
    rep.check("graph file in the state dir", os.path.exists(p["state_file"]), p["state_file"])


# ---------------------------------------------------------------- mcp-server-git
async def git(s, rec, p, rep):
    x = p["prefix"]
    await tools_check(s, rep, x, ["git_status", "git_add", "git_commit", "git_log", "git_diff"])
    # The config names no repository: the profile's rootsAs passes its first own root.
    procs = server_processes("mcp-server-git", "mcp-server-git")
    argv = procs[0][1] if len(procs) == 1 else []
    rep.check("granted repo becomes --repository (rootsAs)", argv[-2:] == ["--repository", p["repo"]],
              f"{len(procs)} server process(es); argv tail {argv[-2:]}")
    r = await call(s, f"{x}__git_status", {"repo_path": p["repo"]})
    rep.check("git status", succeeded(r) and "new.txt" in r["text"], r["text"])
    # An absolute path: the gateway's policy stage refuses relative paths (it cannot know
    # what they are relative to), fail-closed even under the allow-all fixture.
    r = await call(s, f"{x}__git_add", {"repo_path": p["repo"], "files": [os.path.join(p["repo"], "new.txt")]})
    r2 = await call(s, f"{x}__git_commit", {"repo_path": p["repo"], "message": "committed through palisade"})
    log = subprocess.run(["git", "-C", p["repo"], "log", "--format=%s"], capture_output=True, text=True).stdout
    rep.check("git add + commit", succeeded(r) and succeeded(r2) and "committed through palisade" in log,
              f"add: {r['text']} / commit: {r2['text']}")
    # Control: the same server unsandboxed reads the outside repository, so the refusal
    # below is the sandbox's doing.
    async def direct(ds, _rec):
        return await call(ds, "git_status", {"repo_path": p["outside_repo"]})
    ctrl = await session(p["direct_cmd"], direct)
    rep.check("control: unsandboxed status of the outside repo", succeeded(ctrl), ctrl["text"][:120])
    r = await call(s, f"{x}__git_status", {"repo_path": p["outside_repo"]})
    refused(rep, "repo outside grants refused", r, p.get("secret_text"))


# ---------------------------------------------------------------- server-sequential-thinking
async def sequential_thinking(s, rec, p, rep):
    x = p["prefix"]
    await tools_check(s, rep, x, ["sequentialthinking"])
    step = {"thought": "compat: first step", "thoughtNumber": 1, "totalThoughts": 2, "nextThoughtNeeded": True}
    r = await call(s, f"{x}__sequentialthinking", step)
    r2 = await call(s, f"{x}__sequentialthinking",
                    dict(step, thought="compat: second step", thoughtNumber=2, nextThoughtNeeded=False))
    # The server keeps the history in its process: the second answer counts both steps.
    ok = succeeded(r) and succeeded(r2) and '"thoughtHistoryLength": 2' in r2["text"]
    rep.check("two thoughts recorded in order", ok, r2["text"][:200])
    log = open(os.environ["COMPAT_ERRLOG"]).read() if os.environ.get("COMPAT_ERRLOG") else ""
    # Only the server's own stderr lines count (the audit records, also on palisade's stderr
    # when no audit file is set, carry the arguments by design).
    logged = any("stderr:" in line and "compat: first step" in line for line in log.splitlines())
    if p.get("thought_logging"):
        # Control: with the user's env turning logging back on, the thoughts do reach the log,
        # so their absence under the profile is the profile's doing.
        rep.check("control: user env wins, thoughts logged", logged, "present" if logged else "absent")
    else:
        rep.check("thoughts kept out of palisade's log (profile env)", not logged,
                  "absent" if not logged else "thought text found in the serve log")


# ---------------------------------------------------------------- mcp-server-time
async def time_server(s, rec, p, rep):
    x = p["prefix"]
    await tools_check(s, rep, x, ["get_current_time", "convert_time"])
    r = await call(s, f"{x}__get_current_time", {"timezone": "Europe/Paris"})
    rep.check("current time", succeeded(r) and "Europe/Paris" in r["text"], r["text"])
    r = await call(s, f"{x}__convert_time",
                   {"source_timezone": "America/New_York", "time": "16:30", "target_timezone": "Asia/Tokyo"})
    rep.check("time conversion", succeeded(r) and "Asia/Tokyo" in r["text"], r["text"])


# ---------------------------------------------------------------- mcp-server-fetch
async def fetch(s, rec, p, rep):
    """The host serves two local pages (tests/compat/checks.rs counts their hits): `allowed_url`,
    whose 127.0.0.1:PORT the config lists in allowedDomains, and `other_url`, not listed."""
    x = p["prefix"]
    await tools_check(s, rep, x, ["fetch"])
    r = await call(s, f"{x}__fetch", {"url": p["allowed_url"]})
    rep.check("fetch of an allowed local URL (egress proxy)", succeeded(r) and "local page" in r["text"],
              r["text"][:200])
    # Control: the same server, unsandboxed, reaches the other page (so the refusal below is
    # the sandbox's doing, not a broken URL).
    async def direct(ds, _rec):
        return await call(ds, "fetch", {"url": p["other_url"]})
    ctrl = await session(p["direct_cmd"], direct)
    rep.check("control: unsandboxed fetch reaches the other port", succeeded(ctrl) and "local page" in ctrl["text"],
              ctrl["text"][:120])
    r = await call(s, f"{x}__fetch", {"url": p["other_url"]})
    rep.check("fetch of a local port not allowed refused", not succeeded(r), r["text"][:200])
    r = await call(s, f"{x}__fetch", {"url": p["allowed_url"].replace("127.0.0.1", "localhost")})
    rep.check("same port by another name (localhost) refused", not succeeded(r), r["text"][:200])


SCENARIOS = {
    "filesystem": filesystem,
    "filesystem-widen": filesystem_widen,
    "fs-server": fs_server,
    "everything": everything,
    "memory-write": memory_write,
    "memory-read": memory_read,
    "memory-restart": memory_restart,
    "git": git,
    "time": time_server,
    "sequential-thinking": sequential_thinking,
    "fetch": fetch,
}


def main():
    scenario, params = sys.argv[1], json.loads(sys.argv[2])
    cmd = common.command_after_dashes()
    rep = Report()

    async def body(s, rec):
        await SCENARIOS[scenario](s, rec, params, rep)

    try:
        anyio.run(lambda: session(cmd, body, sampling_callback=sampling_callback,
                                  elicitation_callback=elicitation_callback))
    except Exception as e:  # reported as a failed check, with the reason
        rep.check("session", False, f"{type(e).__name__}: {e}")
    print(json.dumps({"scenario": scenario, "checks": rep.checks}))


if __name__ == "__main__":
    main()
