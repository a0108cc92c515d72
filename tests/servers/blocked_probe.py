"""An MCP server (Python `mcp` SDK) whose tools touch places their arguments never name,
for the end-to-end `[SANDBOX BLOCKED]` tests (tests/gaps.rs). Targets come from the
environment the config gives it:
- write_fixed: writes BLOCKED_TARGET (an isError result on OSError);
- write_fixed_raise: the same, but an OSError is a JSON-RPC error (thrown);
- read_shadow: reads /etc/shadow;
- parse_count: int(text); bad input raises ValueError (an ordinary tool error);
- admin_only: always refuses with the tool's own "Permission denied" (not the kernel's);
- echo_error: fails with the text it is given (a tool that echoes agent-chosen content in
  its error, as many do).
"""

import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError

server = MCPServer("blocked-probe")


def _write() -> str:
    target = os.environ["BLOCKED_TARGET"]
    with open(target, "w") as f:
        f.write("written by blocked_probe\n")
    return "written"


@server.tool()
def write_fixed() -> str:
    """Writes a fixed file chosen by the server's configuration."""
    try:
        return _write()
    except OSError as e:
        raise ToolError(str(e))


@server.tool()
def write_fixed_raise() -> str:
    """Writes a fixed file; a failure is a JSON-RPC error."""
    try:
        return _write()
    except OSError as e:
        raise MCPError(-32603, str(e))


@server.tool()
def read_shadow() -> str:
    """Reads the host's password hashes."""
    try:
        with open("/etc/shadow") as f:
            return f"read {len(f.read())} bytes"
    except OSError as e:
        raise ToolError(str(e))


@server.tool()
def parse_count(text: str) -> str:
    """Parses an integer."""
    return str(int(text))


@server.tool()
def admin_only() -> str:
    """Refuses every caller, in the tool's own words."""
    raise ValueError("Permission denied: this tool needs the admin role")


@server.tool()
def echo_error(text: str) -> str:
    """Fails with `text` as its error message."""
    raise ToolError(text)


if __name__ == "__main__":
    print("blocked probe starting", file=sys.stderr)
    server.run("stdio")
