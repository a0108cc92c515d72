"""Calls one tool through `palisade serve` with the Python `mcp` SDK's high-level `Client`,
answering every elicitation as a person who approves would (`approve: true`) and every
sampling request with a canned model answer, and prints one JSON report: the era, the
questions and prompts seen, and the call's outcome. Used by tests/protocol/ (common.rs).

Usage: approve_eras.py MODE TOOL ARGS_JSON -- CMD ARGS...
  MODE: `2026-07-28` (no handshake; Palisade asks through an input-required result, which
        the SDK answers by retrying) or `legacy` (the initialize handshake; Palisade sends
        `elicitation/create`).
Drivers report; they never assert (the Rust tests do)."""

import asyncio
import json
import os
import sys

from mcp import Client, StdioServerParameters, types
from mcp.shared.exceptions import MCPError


async def main():
    mode, tool, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    questions = []

    prompts = []

    async def approve(context, p):
        questions.append(p.message)
        # A server's own form asking for a name (tests/servers/modern_server.py) gets one.
        props = (getattr(p, "requested_schema", None) or {}).get("properties", {})
        if "name" in props:
            return types.ElicitResult(action="accept", content={"name": "Ada from python"})
        return types.ElicitResult(action="accept", content={"approve": True})

    async def sample(context, p):
        prompts.append(" ".join(getattr(m.content, "text", "") for m in p.messages))
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="sampled-by-the-python-agent"),
            model="canned",
        )

    out = {"mode": mode}
    async with Client(params, mode=mode, elicitation_callback=approve, sampling_callback=sample) as client:
        try:
            r = await asyncio.wait_for(client.call_tool(tool, args), 90)
            texts = [c.text for c in r.content if getattr(c, "type", "") == "text"]
            out["call"] = {"ok": True, "is_error": bool(r.is_error), "text": "\n".join(texts)}
        except MCPError as e:
            out["call"] = {"ok": False, "code": e.code, "text": e.message}
    out["questions"] = questions
    out["prompts"] = prompts
    print(json.dumps(out))


asyncio.run(main())
