"""A small real MCP server (Python `mcp` SDK, MCPServer) for the gateway tests.

Tools the real reference servers do not offer but the tests need:
- pid: the server's own pid (inside its PID namespace when sandboxed);
- instance: a random id drawn at start, to tell a restarted server from the first one;
- die_in: SIGKILLs this server after a delay, i.e. a crash in the middle of a call;
- wait_for_cancel: blocks until cancelled, then writes a marker file (proves that the
  agent's cancellation reached the downstream server through the gateway);
- huge: an answer of N MiB, to exceed rmcp's 16 MiB line limit;
- write_raise / write_result: write a file; an OSError becomes a JSON-RPC error (MCPError)
  or an `isError: true` result respectively: the thrown and the isError case of
  [SANDBOX BLOCKED].
"""

import asyncio
import os
import signal
import sys
import threading

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError

server = MCPServer("probe")
INSTANCE = os.urandom(8).hex()


@server.tool()
def instance() -> str:
    """A random id drawn when this server process started."""
    return INSTANCE


@server.tool()
def pid() -> str:
    """This server's process id."""
    return str(os.getpid())


@server.tool()
async def die_in(seconds: float) -> str:
    """Kills this server with SIGKILL after `seconds`, while the call is still running."""
    threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    await asyncio.sleep(120)
    return "survived"


@server.tool()
async def wait_for_cancel(marker: str) -> str:
    """Waits (up to 120 s) until the call is cancelled; then writes `marker`."""
    try:
        await asyncio.sleep(120)
    except asyncio.CancelledError:
        with open(marker, "w") as f:
            f.write("cancelled")
        raise
    return "not cancelled"


@server.tool()
def huge(mib: int) -> str:
    """Returns a string of `mib` MiB (one JSON-RPC line larger than rmcp's 16 MiB limit
    when mib > 16)."""
    return "x" * (mib * 1024 * 1024)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


@server.tool()
def write_raise(path: str, text: str) -> str:
    """Writes `text` to `path`; a failure is a JSON-RPC error."""
    try:
        _write(path, text)
    except OSError as e:
        raise MCPError(-32603, str(e))
    return "written"


@server.tool()
def write_result(path: str, text: str) -> str:
    """Writes `text` to `path`; a failure is an isError result."""
    try:
        _write(path, text)
    except OSError as e:
        raise ToolError(str(e))
    return "written"


if __name__ == "__main__":
    print("probe server starting", file=sys.stderr)
    server.run("stdio")
