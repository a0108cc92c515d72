"""Runs a list of tool calls through one MCP server command with the Python `mcp` SDK and
prints one JSON array: [{"tool", "error", "text"}] in call order. Usage:
    calls.py CALLS_JSON -- CMD ARGS...
CALLS_JSON is [{"tool": NAME, "args": {...}}]. A JSON-RPC error is reported as error=true
with its message (the agent sees it the same way)."""

import asyncio
import json
import sys

from common import call_each, command_after_dashes, session, tool_names


async def main():
    calls = json.loads(sys.argv[1])
    async with session(command_after_dashes(), "CALLS_ERRLOG", "w", init_timeout=90) as s:
        names = await tool_names(s)
        out = await call_each(s, calls)
    print(json.dumps({"tools": names, "calls": out}))


asyncio.run(main())
