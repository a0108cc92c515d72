"""Drives `palisade fs-server` with the official Python MCP SDK (an independent client).

Usage: python fs_server_interop.py PALISADE_BINARY
Exits 0 and prints "INTEROP OK" when every check passed; otherwise raises with the reason.
"""

import asyncio
import json
import os
import sys
import tempfile

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

BIN = sys.argv[1]


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"ok: {what}", flush=True)


def error_code(result):
    """The fs-server's structured error code of a tool result, or None on success."""
    if not result.is_error:
        return None
    return json.loads(result.content[0].text)["error"]


async def wait_for_roots(session, predicate, what):
    # A bounded wait for the server to apply roots it fetched asynchronously: it polls the
    # server's own introspection tool, never a clock.
    for _ in range(200):
        r = await session.call_tool("list_roots", {})
        state = r.structured_content
        if predicate(state):
            return state
        await asyncio.sleep(0.02)
    raise AssertionError(f"roots never became {what}: last {state}")


async def main():
    with tempfile.TemporaryDirectory() as tmp:
        tmp = os.path.realpath(tmp)
        a, b, outside = (os.path.join(tmp, n) for n in ("a", "b", "outside"))
        for d in (a, b, outside):
            os.mkdir(d)
        with open(os.path.join(a, "a.txt"), "w") as f:
            f.write("alpha")
        with open(os.path.join(b, "b.txt"), "w") as f:
            f.write("beta")
        secret = os.path.join(outside, "secret.txt")
        with open(secret, "w") as f:
            f.write("top secret")
        os.symlink(outside, os.path.join(a, "escape"))
        # Unprotected, the planted link reaches the secret: the attack below is real.
        with open(os.path.join(a, "escape", "secret.txt")) as f:
            check(f.read() == "top secret", "the symlink escape works without the server")

        params = StdioServerParameters(command=BIN, args=["fs-server", "--root", a])

        # 1. A client without roots: the server uses --root.
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                tools = {t.name: t for t in (await s.list_tools()).tools}
                check(
                    set(tools) == {"read", "list", "write", "stat", "search", "list_roots"},
                    f"tools listed: {sorted(tools)}",
                )
                check(tools["read"].annotations.read_only_hint is True, "read is readOnlyHint")
                check(tools["write"].annotations.destructive_hint is True, "write is destructiveHint")
                check("path" in tools["read"].input_schema["properties"], "read takes `path`")
                r = await s.call_tool("read", {"path": os.path.join(a, "a.txt")})
                check(not r.is_error and r.content[0].text == "alpha", "read inside the root")
                r = await s.call_tool("read", {"path": secret})
                check(error_code(r) == "FORBIDDEN", "read outside the root is FORBIDDEN")
                check(a in json.loads(r.content[0].text)["message"], "the refusal names the root")
                r = await s.call_tool("read", {"path": os.path.join(a, "escape", "secret.txt")})
                check(error_code(r) == "FORBIDDEN", "symlink escape is FORBIDDEN")
                r = await s.call_tool("read", {"path": os.path.join(a, "..", "outside", "secret.txt")})
                check(error_code(r) == "FORBIDDEN", "`..` escape is FORBIDDEN")
                r = await s.call_tool("write", {"path": os.path.join(a, "new.txt"), "content": "n"})
                check(not r.is_error and open(os.path.join(a, "new.txt")).read() == "n", "write inside")
                r = await s.call_tool("write", {"path": os.path.join(outside, "x.txt"), "content": "n"})
                check(error_code(r) == "FORBIDDEN" and not os.path.exists(os.path.join(outside, "x.txt")),
                      "write outside is FORBIDDEN and nothing was written")
                pol = await s.read_resource("palisade-fs://policy")
                doc = json.loads(pol.contents[0].text)
                check(doc["roots"][0]["path"] == a and doc["rootsSource"] == "command-line",
                      "policy resource names the --root")
                from urllib.parse import quote
                seg = quote(os.path.join(a, "a.txt"), safe="")
                res = await s.read_resource(f"palisade-fs://file/{seg}")
                check(res.contents[0].text == "alpha", "file/{path} template reads inside")
                try:
                    await s.read_resource(f"palisade-fs://file/{quote(secret, safe='')}")
                    check(False, "file/{path} outside must fail")
                except Exception as e:  # McpError carries the JSON-RPC error
                    data = getattr(getattr(e, "error", None), "data", None) or {}
                    check(data.get("error") == "FORBIDDEN", f"file/{{path}} outside is FORBIDDEN ({e})")

        # 2. A client with roots: they replace --root, and list_changed is honoured.
        current = [b]

        async def list_roots(_ctx):
            return types.ListRootsResult(roots=[types.Root(uri="file://" + quote(p)) for p in current])

        from urllib.parse import quote
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write, list_roots_callback=list_roots) as s:
                await s.initialize()
                st = await wait_for_roots(s, lambda st: st["source"] == "client", "the client's")
                check([r["path"] for r in st["roots"]] == [b], "client roots replaced --root")
                r = await s.call_tool("read", {"path": os.path.join(b, "b.txt")})
                check(not r.is_error and r.content[0].text == "beta", "read in the client root")
                r = await s.call_tool("read", {"path": os.path.join(a, "a.txt")})
                check(error_code(r) == "FORBIDDEN", "the replaced --root is now FORBIDDEN")
                version = st["version"]
                current[:] = [a]
                await s.send_roots_list_changed()
                st = await wait_for_roots(s, lambda st: st["version"] > version, "re-fetched")
                check([r["path"] for r in st["roots"]] == [a], "list_changed re-fetched the roots")
                r = await s.call_tool("read", {"path": os.path.join(a, "a.txt")})
                check(not r.is_error, "read in the new root")
                r = await s.call_tool("read", {"path": os.path.join(b, "b.txt")})
                check(error_code(r) == "FORBIDDEN", "the old client root is FORBIDDEN")
    print("INTEROP OK", flush=True)


asyncio.run(main())
