"""A tiny MCP server (Python `mcp` SDK) that reports, from inside its own sandbox, what the
roots tests compare: its mount table and the roots its client (palisade) announces.

- mountinfo: /proc/self/mountinfo as read inside the sandbox;
- announced: the client's roots/list answer, as file:// URIs;
- read_text(path): reads a file (a path argument: palisade checks it against the roots);
- peek(what): reads the file named after a `peek:` prefix, a value palisade does not read as
  a path (the hostile direct ask, disguised: only the sandbox's mounts stand between it and
  the host; a plain path there is checked like any path argument, issue 23).
"""

import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("roots-probe")


@server.tool()
def mountinfo() -> str:
    """The mount table inside this server's sandbox."""
    with open("/proc/self/mountinfo") as f:
        return f.read()


@server.tool()
async def announced(ctx: Context) -> str:
    """The roots the client announces (one file:// URI per line)."""
    r = await ctx.session.list_roots()
    return "\n".join(str(root.uri) for root in r.roots)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def read_text(path: str) -> str:
    """Reads a text file."""
    with open(path) as f:
        return f.read()


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def peek(what: str) -> str:
    """Reads whatever `what` names after its `peek:` prefix, or says why it cannot."""
    what = what.removeprefix("peek:")
    try:
        with open(what) as f:
            return "READ: " + f.read()
    except OSError as e:
        return f"UNREADABLE: {e.strerror}"


if __name__ == "__main__":
    print("roots probe starting", file=sys.stderr)
    server.run("stdio")
