"""Runs a list of tool calls through one MCP server command with the Python `mcp` SDK and
prints one JSON array: [{"tool", "error", "text"}] in call order. Usage:
    calls.py CALLS_JSON -- CMD ARGS...
CALLS_JSON is [{"tool": NAME, "args": {...}}]. A JSON-RPC error is reported as error=true
with its message (the agent sees it the same way)."""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client


async def main():
    calls = json.loads(sys.argv[1])
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    out = []
    with open(__import__("os").environ.get("CALLS_ERRLOG", "/dev/null"), "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await asyncio.wait_for(session.initialize(), 90)
                tools = await asyncio.wait_for(session.list_tools(), 30)
                names = [t.name for t in tools.tools]
                for c in calls:
                    try:
                        r = await asyncio.wait_for(session.call_tool(c["tool"], c.get("args", {})), 60)
                        text = "\n".join(getattr(b, "text", "") for b in r.content)
                        out.append({"tool": c["tool"], "error": bool(r.is_error), "text": text})
                    except Exception as e:
                        out.append({"tool": c["tool"], "error": True, "text": str(getattr(e, "error", e))})
    print(json.dumps({"tools": names, "calls": out}))


asyncio.run(main())
