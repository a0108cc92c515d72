"""An MCP server whose tools run into resource limits (and write protection) on demand, for
tests/limits.rs.

Raw JSON-RPC over stdio with the standard library only, so that any python3 runs it (the
task-limit tests run palisade as an unprivileged user, who may not reach the test venv).
Each tool answers JSON: what it reached and the error that stopped it, if any. Launched
directly it is the control (nothing stops it); behind palisade the limits should.
"""

import ctypes
import errno
import json
import os
import signal
import sys
import time

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.malloc.restype = ctypes.c_void_p
LIBC.malloc.argtypes = [ctypes.c_size_t]
LIBC.free.argtypes = [ctypes.c_void_p]


def fork_bomb(limit, hold=0):
    """Forks sleeping children until `limit` or until the kernel refuses, then ends them."""
    children, error = [], None
    try:
        while len(children) < limit:
            pid = os.fork()
            if pid == 0:
                # The child only waits: the parent (or the sandbox's end) kills it.
                while True:
                    signal.pause()
            children.append(pid)
    except OSError as e:
        error = errno.errorcode.get(e.errno, str(e.errno))
    time.sleep(hold)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    for pid in children:
        os.waitpid(pid, 0)
    return {"forked": len(children), "error": error}


def fork_and_hold(limit, seconds):
    """As fork_bomb, keeping the children for `seconds` before ending them (a watchdog
    that samples the tree must get to see it)."""
    return fork_bomb(limit, seconds)


def reserve(mb):
    """Mallocs `mb` MiB in one block without touching it (no RAM is used), then frees it."""
    p = LIBC.malloc(mb << 20)
    if not p:
        return {"reserved": 0, "error": errno.errorcode.get(ctypes.get_errno())}
    LIBC.free(p)
    return {"reserved": mb, "error": None}


HELD = []


def hog(mb):
    """Allocates and touches `mb` MiB in 16 MiB blocks, kept until the server exits."""
    try:
        while len(HELD) * 16 < mb:
            HELD.append(b"x" * (16 << 20))
    except MemoryError:
        return {"held": len(HELD) * 16, "error": "MemoryError"}
    return {"held": len(HELD) * 16, "error": None}


OPENED = []


def open_files(count):
    """Opens /dev/null until `count` descriptors or until the kernel refuses; closes them."""
    error = None
    try:
        while len(OPENED) < count:
            OPENED.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as e:
        error = errno.errorcode.get(e.errno, str(e.errno))
    n = len(OPENED)
    while OPENED:
        os.close(OPENED.pop())
    return {"opened": n, "error": error}


def write_file(path):
    """Writes a line to `path` (created or appended)."""
    try:
        with open(path, "a") as f:
            f.write("written by limits_probe.py\n")
    except OSError as e:
        return {"written": False, "error": errno.errorcode.get(e.errno, str(e.errno))}
    return {"written": True, "error": None}


BOOT = os.urandom(8).hex()


def alive():
    """A token drawn at start (a restarted server has a new one; its pid inside a PID
    namespace is the same every time)."""
    return {"boot": BOOT, "pid": os.getpid()}


TOOLS = {
    "fork_bomb": (fork_bomb, {"limit": "integer"}),
    "fork_and_hold": (fork_and_hold, {"limit": "integer", "seconds": "integer"}),
    "reserve": (reserve, {"mb": "integer"}),
    "hog": (hog, {"mb": "integer"}),
    "alive": (alive, {}),
    "open_files": (open_files, {"count": "integer"}),
    "write_file": (write_file, {"path": "string"}),
}


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def handle(req):
    method, rid = req.get("method"), req.get("id")
    if rid is None:
        return
    if method == "initialize":
        result = {
            "protocolVersion": req["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "limits-probe", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [
            {"name": name, "description": fn.__doc__,
             "annotations": {"readOnlyHint": name != "write_file"},
             "inputSchema": {"type": "object",
                             "properties": {k: {"type": t} for k, t in params.items()},
                             "required": list(params)}}
            for name, (fn, params) in TOOLS.items()]}
    elif method == "tools/call":
        fn, _ = TOOLS[req["params"]["name"]]
        out = fn(**req["params"].get("arguments", {}))
        result = {"content": [{"type": "text", "text": json.dumps(out)}], "isError": False}
    elif method == "ping":
        result = {}
    else:
        send({"jsonrpc": "2.0", "id": rid,
              "error": {"code": -32601, "message": "unknown method " + str(method)}})
        return
    send({"jsonrpc": "2.0", "id": rid, "result": result})


for line in sys.stdin:
    if line.strip():
        handle(json.loads(line))
