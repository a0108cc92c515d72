"""A tiny MCP server (Python `mcp` SDK 2.3, `MCPServer`) written the 2026-07-28 way: it never
sends a request of its own, it asks for roots, a person's answer and a model's answer through
resolvers. In 2026-07-28 those become `input_required` results that the client answers by
retrying; in 2025-11-25 they are standalone requests. The protocol tests run it behind
Palisade to prove both eras reach it, with Palisade's roots.

- era(): the protocol version of the request that called it, and the client's name;
- where(): the roots its client gave it (file:// URIs, one per line);
- greet(): asks the person for a name (elicitation), answers "hello NAME";
- muse(): asks the client's model (sampling), answers "model said: TEXT";
- read_text(path): reads a file (a path argument: palisade checks it against the roots);
- grow(): adds the tool `grown` and tells `subscriptions/listen` streams the list changed.
"""

import sys
from typing import Annotated

from mcp.server.mcpserver import Context, Elicit, ListRoots, MCPServer, Resolve, Sample
from mcp.types import (
    CreateMessageResult,
    ListRootsResult,
    SamplingMessage,
    TextContent,
    ToolAnnotations,
)
from pydantic import BaseModel

server = MCPServer("modern-probe")


@server.tool()
def era(ctx: Context) -> str:
    """The protocol version of this request and the client's name."""
    info = ctx.request_context.meta or {}
    name = "?"
    client = getattr(info, "client_info", None) or (info.get("io.modelcontextprotocol/clientInfo") if isinstance(info, dict) else None)
    if client is not None:
        name = client.get("name") if isinstance(client, dict) else getattr(client, "name", "?")
    return f"{ctx.protocol_version} {name}"


def _roots() -> ListRoots:
    return ListRoots()


@server.tool()
def where(roots: Annotated[ListRootsResult, Resolve(_roots)]) -> str:
    """The roots the client gave this request."""
    return "\n".join(str(r.uri) for r in roots.roots)


class Name(BaseModel):
    name: str


def _ask_name() -> Elicit[Name]:
    return Elicit("Who is asking?", Name)


@server.tool()
def greet(who: Annotated[Name, Resolve(_ask_name)]) -> str:
    """Asks the person behind the client for a name."""
    return f"hello {who.name}"


def _ask_model() -> Sample:
    return Sample(
        [SamplingMessage(role="user", content=TextContent(type="text", text="say hi"))],
        max_tokens=20,
    )


@server.tool()
def muse(answer: Annotated[CreateMessageResult, Resolve(_ask_model)]) -> str:
    """Asks the client's model to say hi."""
    content = answer.content
    text = content.text if isinstance(content, TextContent) else str(content)
    return f"model said: {text}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def read_text(path: str) -> str:
    """Reads a text file."""
    with open(path) as f:
        return f.read()


def _grown() -> str:
    return "grown"


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool `grown`; listeners hear that the tool list changed."""
    server.add_tool(_grown, name="grown", description="Appeared when grow was called.")
    await ctx.notify_tools_changed()
    return "grew"


if __name__ == "__main__":
    print("modern probe starting", file=sys.stderr)
    server.run("stdio")
