"""One tool call through `palisade serve --http` with the Python `mcp` SDK's high-level
`Client` in a given era, answering every elicitation as a person who approves would and every
sampling request with a canned model answer. For tests/http_front/rounds.rs.

Usage: http_eras.py URL TOKEN MODE TOOL ARGS_JSON
  MODE: `2026-07-28` (no handshake: Palisade's questions come as input-required results,
        which the SDK answers by retrying) or `legacy` (a session: questions come as requests
        on its stream).
Prints one JSON report: {"mode", "call": {...}, "questions": [...], "prompts": [...]} or
{"error": "..."}. Reports; never asserts.
"""

import asyncio
import json
import sys

from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError


async def main(url, token, mode, tool, args):
    out = {"mode": mode, "questions": [], "prompts": []}

    async def approve(_context, p):
        out["questions"].append(p.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async def sample(_context, p):
        out["prompts"].append(" ".join(getattr(m.content, "text", "") for m in p.messages))
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="sampled-over-http"),
            model="canned",
        )

    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode, elicitation_callback=approve,
                          sampling_callback=sample) as client:
            try:
                r = await asyncio.wait_for(client.call_tool(tool, args), 60)
                texts = [c.text for c in r.content if getattr(c, "type", "") == "text"]
                out["call"] = {"ok": True, "is_error": bool(r.is_error), "text": "\n".join(texts)}
            except MCPError as e:
                out["call"] = {"ok": False, "code": e.code, "text": e.message}
    return out


if __name__ == "__main__":
    try:
        report = asyncio.run(main(*sys.argv[1:5], json.loads(sys.argv[5])))
    except BaseException as e:  # the report says what failed; the Rust test decides
        report = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(report))
