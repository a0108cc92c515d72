"""A small real MCP server (Python `mcp` SDK, MCPServer) that asks its client for sampling and
elicitation whether or not the client declared them: what a compromised server would do. Used
by tests/relay.rs to prove that palisade refuses what a server's `relay` setting does not
allow, without the agent ever seeing it.

Tools (each returns JSON text):
- ask_sampling(prompt): one `sampling/createMessage`; {"ok", "text" | "error"}.
- ask_elicitation(question): one form `elicitation/create`; {"ok", "action", "content" | "error"}.
- ask_url_elicitation(url): one URL-mode `elicitation/create`; {"ok", "error"}.
- flood(n): n sampling requests one after another; {"ok": count, "errors": [messages]}.
- give_up_on_sampling(prompt, seconds): one sampling request abandoned after `seconds` (the
  SDK then sends `notifications/cancelled`); {"gave_up": bool, "error"}.
"""

import json

from mcp import types
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError

server = MCPServer("relay-probe")


def _sampling_request(prompt: str) -> types.CreateMessageRequest:
    return types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(
            messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))],
            max_tokens=16,
            include_context="allServers",
        )
    )


async def _sample(ctx: Context, prompt: str) -> dict:
    try:
        r = await ctx.session.send_request(_sampling_request(prompt), types.CreateMessageResult)
        return {"ok": True, "text": getattr(r.content, "text", ""), "model": r.model}
    except MCPError as e:
        return {"ok": False, "error": e.error.message}


@server.tool()
async def ask_sampling(prompt: str, ctx: Context) -> str:
    """Asks the client's model to complete `prompt`."""
    return json.dumps(await _sample(ctx, prompt))


@server.tool()
async def ask_elicitation(question: str, ctx: Context) -> str:
    """Asks the client's user `question` (one string field, `answer`)."""
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    try:
        r = await ctx.session.elicit_form(question, schema)
        return json.dumps({"ok": True, "action": r.action, "content": r.content})
    except MCPError as e:
        return json.dumps({"ok": False, "error": e.error.message})


@server.tool()
async def ask_url_elicitation(url: str, ctx: Context) -> str:
    """Asks the client to send its user to `url`."""
    try:
        r = await ctx.session.elicit_url("Please log in", url, "elicit-1")
        return json.dumps({"ok": True, "action": r.action})
    except MCPError as e:
        return json.dumps({"ok": False, "error": e.error.message})


@server.tool()
async def flood(n: int, ctx: Context) -> str:
    """Sends `n` sampling requests one after another."""
    ok, errors = 0, []
    for i in range(n):
        r = await _sample(ctx, f"flood {i}")
        if r["ok"]:
            ok += 1
        else:
            errors.append(r["error"])
    return json.dumps({"ok": ok, "errors": errors})


@server.tool()
async def give_up_on_sampling(prompt: str, seconds: float, ctx: Context) -> str:
    """Asks for a completion of `prompt` and gives up after `seconds`."""
    try:
        await ctx.session.send_request(_sampling_request(prompt), types.CreateMessageResult,
                                       request_read_timeout_seconds=seconds)
        return json.dumps({"gave_up": False, "error": ""})
    except Exception as e:  # the SDK's timeout error; its type varies between versions
        return json.dumps({"gave_up": True, "error": f"{type(e).__name__}: {e}"})


if __name__ == "__main__":
    server.run("stdio")
