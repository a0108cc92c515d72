"""The Python `mcp` SDK's Streamable HTTP client against `palisade serve --http`, for
tests/http_front/ (`Front::client`).

Usage: http_client.py URL TOKEN CALLS_JSON, TOKEN "" for none; CALLS_JSON a list of
{"tool": NAME, "args": {...}, "progress": true to ask for progress}. Prints one JSON report:
{"tools": [...], "calls": [{"ok", "text", "progress": [[progress, total], ...] when asked}...]}
or {"error": "..."} when the session could not be made. Reports; never asserts.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from common import call, tool_names


async def main(url: str, token: str, calls: list) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as s:
                await asyncio.wait_for(s.initialize(), 30)
                report = {"tools": await tool_names(s), "calls": []}
                for c in calls:
                    seen = []

                    async def on_progress(progress, total, message):
                        seen.append([progress, total])

                    kw = {"progress_callback": on_progress} if c.get("progress") else {}
                    done = await call(s, c["tool"], c.get("args", {}), **kw)
                    if c.get("progress"):
                        done["progress"] = seen
                    report["calls"].append(done)
                return report


if __name__ == "__main__":
    try:
        out = asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))
    except BaseException as e:  # the report says what failed; the Rust test decides
        out = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(out))
