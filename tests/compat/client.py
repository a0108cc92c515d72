"""Compatibility client: drives one real MCP server through `palisade serve` with the Python
`mcp` SDK and prints one JSON report on stdout for tests/compat.rs.

usage: client.py SCENARIO PARAMS_JSON -- COMMAND ARGS...

Each scenario runs its checks and reports, per check, {"name", "pass", "detail"} plus
"gap": true for a check that depends on gateway work not merged yet (reported, not failed).
The tool names are the gateway's (`SERVER__tool`); PARAMS_JSON carries the server's prefix,
the granted directories and the paths that must stay out of reach.
"""

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

DEADLINE = 30.0  # bound for "eventually" steps; never a timing assertion


def text_of(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


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
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="sampled-by-compat-client"),
        model="compat-model",
        stop_reason="endTurn",
    )


async def elicitation_callback(context, params):
    RELAYED["elicitation"].append(params.message)
    return types.ElicitResult(action="accept", content={"name": "elicited-by-compat-client"})


async def session(cmd, body, **kw):
    rec = Recorder()
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    errlog = open(os.environ.get("COMPAT_ERRLOG", os.devnull), "a")
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write, message_handler=rec, **kw) as s:
            await s.initialize()
            return await body(s, rec)


async def call(s, name, args, **kw):
    """{"ok": no JSON-RPC error, "is_error": result.isError, "text": ...}"""
    try:
        r = await s.call_tool(name, args, **kw)
        return {"ok": True, "is_error": bool(r.is_error), "text": text_of(r)}
    except MCPError as e:
        return {"ok": False, "is_error": True, "text": e.message}


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


# ---------------------------------------------------------------- server-filesystem
async def filesystem(s, rec, p, rep):
    x = p["prefix"]
    await tools_check(s, rep, x, ["read_text_file", "write_file", "list_directory", "list_allowed_directories",
                                  "edit_file", "move_file", "search_files", "get_file_info"])
    r = await call(s, f"{x}__list_allowed_directories", {})
    rep.check("roots tool shows the grant", succeeded(r) and p["granted"] in r["text"], r["text"])
    target = os.path.join(p["granted"], "written.txt")
    r = await call(s, f"{x}__write_file", {"path": target, "content": "written through palisade"})
    on_host = open(target).read() if os.path.exists(target) else None
    rep.check("write in granted dir", succeeded(r) and on_host == "written through palisade", r["text"])
    r = await call(s, f"{x}__read_text_file", {"path": os.path.join(p["granted"], "hello.txt")})
    rep.check("read in granted dir", succeeded(r) and "hello from the host" in r["text"], r["text"])
    r = await call(s, f"{x}__read_text_file", {"path": p["secret_file"]})
    refused(rep, "read outside grants refused", r, p["secret_text"])


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


async def memory_read(s, rec, p, rep):
    x = p["prefix"]
    r = await call(s, f"{x}__read_graph", {})
    rep.check("entity survives a restart", succeeded(r) and "palisade-compat" in r["text"], r["text"])
    rep.check("graph file in the state dir", os.path.exists(p["state_file"]), p["state_file"])


# ---------------------------------------------------------------- mcp-server-git
async def git(s, rec, p, rep):
    x = p["prefix"]
    await tools_check(s, rep, x, ["git_status", "git_add", "git_commit", "git_log", "git_diff"])
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
class Hits(BaseHTTPRequestHandler):
    hits = []

    def do_GET(self):
        Hits.hits.append(self.path)
        body = b"<html><body><p>local page for palisade compat</p></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def local_http():
    srv = HTTPServer(("127.0.0.1", 0), Hits)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


async def fetch(s, rec, p, rep):
    x = p["prefix"]
    await tools_check(s, rep, x, ["fetch"])
    srv = local_http()
    url = f"http://127.0.0.1:{srv.server_address[1]}/page"
    try:
        # Control: the same server, unsandboxed, reaches the page (so the refusal below is
        # the sandbox's doing, not a broken URL).
        async def direct(ds, _rec):
            return await call(ds, "fetch", {"url": url})
        ctrl = await session(p["direct_cmd"], direct)  # the control has no sandbox
        rep.check("control: unsandboxed fetch reaches the host", succeeded(ctrl) and "local page" in ctrl["text"],
                  ctrl["text"][:120])
        before = len(Hits.hits)
        r = await call(s, f"{x}__fetch", {"url": url})
        rep.check("fetch of a host URL refused (no egress granted)",
                  not succeeded(r) and len(Hits.hits) == before, r["text"][:200])
    finally:
        srv.shutdown()


SCENARIOS = {
    "filesystem": filesystem,
    "fs-server": fs_server,
    "everything": everything,
    "memory-write": memory_write,
    "memory-read": memory_read,
    "git": git,
    "time": time_server,
    "fetch": fetch,
}


def main():
    scenario, params = sys.argv[1], json.loads(sys.argv[2])
    cmd = sys.argv[sys.argv.index("--") + 1:]
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
