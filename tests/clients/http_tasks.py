"""A raw 2026-07-28 agent with the tasks extension (SEP-2663) over Streamable HTTP: no SDK
speaks the extension yet, so this driver sends the requests the extension defines itself.

Usage: http_tasks.py URL TOKEN TOOL ARGS_JSON
Calls TOOL as a plain `tools/call` (once without the extension declared, once with it), then
polls `tasks/get` until the task is done, and tries `tasks/update`. Prints one JSON report:
{"plain": RESPONSE, "created": RESPONSE, "done": RESPONSE, "polls": N, "update": RESPONSE}
or {"error": "..."}. Reports; never asserts.
"""

import asyncio
import json
import sys

from mcp.shared._httpx_utils import create_mcp_http_client

VERSION = "2026-07-28"


def envelope(extension):
    caps = {"extensions": {"io.modelcontextprotocol/tasks": {}}} if extension else {}
    return {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "raw-http-tasks", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    }


async def rpc(http, url, rid, method, params, name=None):
    headers = {"MCP-Protocol-Version": VERSION, "Mcp-Method": method,
               "Accept": "application/json, text/event-stream"}
    if name is not None:
        headers["Mcp-Name"] = name
    r = await http.post(url, json={"jsonrpc": "2.0", "id": rid, "method": method,
                                   "params": params}, headers=headers)
    text = r.text
    if "text/event-stream" in r.headers.get("content-type", ""):
        for line in text.splitlines():
            if line.startswith("data:"):
                msg = json.loads(line[5:].strip() or "null")
                if isinstance(msg, dict) and msg.get("id") == rid:
                    return msg
        return {"http": r.status_code, "body": text}
    try:
        return json.loads(text)
    except ValueError:
        return {"http": r.status_code, "body": text}


async def main(url, token, tool, args):
    out = {}
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        out["plain"] = await rpc(http, url, 1, "tools/call",
                                 {"name": tool, "arguments": args, "_meta": envelope(False)}, tool)
        out["created"] = await rpc(http, url, 2, "tools/call",
                                   {"name": tool, "arguments": args, "_meta": envelope(True)}, tool)
        task = (out["created"].get("result") or {}).get("taskId")
        if task is None:
            return out
        for n in range(240):  # a hang guard, not a timing assertion
            got = await rpc(http, url, 10 + n, "tasks/get",
                            {"taskId": task, "_meta": envelope(True)}, task)
            out["done"], out["polls"] = got, n + 1
            if "error" in got or (got.get("result") or {}).get("status") in (
                    "completed", "failed", "cancelled"):
                break
            await asyncio.sleep(0.25)
        out["update"] = await rpc(http, url, 500, "tasks/update",
                                  {"taskId": task, "inputResponses": {}, "_meta": envelope(True)}, task)
    return out


if __name__ == "__main__":
    try:
        report = asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])))
    except BaseException as e:  # the report says what failed; the Rust test decides
        report = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(report))
