"""Sends one of each non-tool request through `palisade serve` (or any MCP server) with the
Python `mcp` SDK and prints one JSON report: for each step, {"ok": true, ...} or
{"ok": false, "text": the JSON-RPC error}. Used by tests/gaps.rs for the audit of prompts,
resources and completions. Usage: prompts_resources.py -- CMD ARGS..."""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client, types


async def step(coro, keep=lambda r: {}):
    try:
        r = await asyncio.wait_for(coro, 60)
        return {"ok": True, **keep(r)}
    except Exception as e:
        return {"ok": False, "text": str(getattr(e, "error", e))}


async def main():
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    out = {}
    with open(os.environ.get("CALLS_ERRLOG", os.devnull), "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as s:
                await asyncio.wait_for(s.initialize(), 90)
                resources = [r.uri for r in (await s.list_resources()).resources]
                uri = str(resources[0])
                out["uri"] = uri
                out["read"] = await step(s.read_resource(uri), lambda r: {"contents": len(r.contents)})
                out["prompt"] = await step(
                    s.get_prompt("everything__simple-prompt", {}),
                    lambda r: {"messages": len(r.messages)},
                )
                out["subscribe"] = await step(s.subscribe_resource(uri))
                out["unsubscribe"] = await step(s.unsubscribe_resource(uri))
                out["complete"] = await step(
                    s.complete(
                        types.PromptReference(type="ref/prompt", name="everything__completable-prompt"),
                        {"name": "department", "value": "Sa"},
                    ),
                    lambda r: {"values": r.completion.values},
                )
                out["echo"] = await step(
                    s.call_tool("everything__echo", {"message": "audited"}),
                    lambda r: {"is_error": bool(r.is_error)},
                )
    print(json.dumps(out))


asyncio.run(main())
