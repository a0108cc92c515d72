"""Connects to `palisade serve` (or any MCP server) with the Python `mcp` SDK in one protocol
era and prints one JSON report: the negotiated version, the tool names, and one call's
outcome per step. Used by tests/protocol/agents.rs.

Usage: eras.py ERA TOOL ARGS_JSON -- CMD ARGS...
  ERA: `modern` (2026-07-28: `server/discover`, then per-request metadata, no handshake) or
       `legacy` (the `initialize` handshake).
Drivers report; they never assert (the Rust tests do)."""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError


async def main():
    era, tool, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    out = {"era": era}
    with open(os.environ.get("DRIVE_ERRLOG", os.devnull), "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as s:
                if era == "modern":
                    found = await asyncio.wait_for(s.discover(), 90)
                    s.adopt(found)
                    out["supported"] = list(found.supported_versions)
                    out["version"] = s.protocol_version
                else:
                    init = await asyncio.wait_for(s.initialize(), 90)
                    out["version"] = init.protocol_version
                tools = (await asyncio.wait_for(s.list_tools(), 60)).tools
                out["tools"] = [t.name for t in tools]
                try:
                    r = await asyncio.wait_for(s.call_tool(tool, args), 60)
                    texts = [c.text for c in r.content if getattr(c, "type", "") == "text"]
                    out["call"] = {"ok": True, "is_error": bool(r.is_error), "text": "\n".join(texts)}
                except MCPError as e:
                    out["call"] = {"ok": False, "code": e.code, "text": e.message}
    print(json.dumps(out))


asyncio.run(main())
