"""A small real MCP server that tries the network every way a server might, for the egress
tests (tests/egress_gateway/). Every failure is an `isError` result carrying the error text.

- http_get(address, via) (not `url`: the policy engine would gate a URL argument first): `env` uses urllib with the proxy variables palisade sets (HTTP_PROXY),
  `socks` speaks SOCKS5 (remote DNS) itself to the proxy ALL_PROXY names, `direct` ignores proxies;
- connect(host, port): a raw TCP connect;
- resolve(name): getaddrinfo;
- udp(host, port): one datagram.
"""

import os
import socket
import struct
import urllib.parse
import urllib.request

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("net-probe")


def _socks_get(url: str) -> str:
    u = urllib.parse.urlsplit(url)
    host, port = u.hostname, u.port or 80
    # The SOCKS5 proxy ALL_PROXY names (127.0.0.1:1080 under bwrap; under Landlock the
    # proxy's loopback port, with the server's credentials: RFC 1929).
    proxy = urllib.parse.urlsplit(os.environ.get("ALL_PROXY", "socks5h://127.0.0.1:1080"))
    s = socket.create_connection((proxy.hostname, proxy.port or 1080), timeout=10)
    try:
        if proxy.username:
            s.sendall(b"\x05\x01\x02")
            if s.recv(2) != b"\x05\x02":
                raise OSError("socks5: username/password not accepted")
            user, pw = proxy.username.encode(), (proxy.password or "").encode()
            s.sendall(b"\x01" + bytes([len(user)]) + user + bytes([len(pw)]) + pw)
            if s.recv(2) != b"\x01\x00":
                raise OSError("socks5: authentication failed")
        else:
            s.sendall(b"\x05\x01\x00")
            if s.recv(2) != b"\x05\x00":
                raise OSError("socks5: no acceptable method")
        name = host.encode()
        s.sendall(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + struct.pack(">H", port))
        reply = s.recv(4)
        if len(reply) < 2 or reply[1] != 0:
            raise OSError(f"socks5 reply {reply[1] if len(reply) > 1 else '?'}: connection not allowed")
        # skip the bound address
        atyp = reply[3]
        s.recv({1: 4, 4: 16}.get(atyp, 0) + 2 if atyp != 3 else s.recv(1)[0] + 2)
        path = u.path or "/"
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {u.netloc}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data.split(b"\r\n\r\n", 1)[-1].decode(errors="replace")
    finally:
        s.close()


@server.tool()
def http_get(address: str, via: str) -> str:
    """GET the URL `address` via `env` (proxy variables), `socks` (SOCKS5 on 127.0.0.1:1080) or `direct`."""
    try:
        if via == "socks":
            return _socks_get(address)
        handlers = [urllib.request.ProxyHandler({})] if via == "direct" else []
        opener = urllib.request.build_opener(*handlers)
        with opener.open(address, timeout=10) as r:
            return r.read().decode(errors="replace")
    except Exception as e:  # the text is what the test reads
        raise ToolError(f"{type(e).__name__}: {e}")


@server.tool()
def connect(host: str, port: int) -> str:
    """Opens a raw TCP connection."""
    try:
        socket.create_connection((host, port), timeout=5).close()
        return "connected"
    except OSError as e:
        raise ToolError(f"connect: {e}")


@server.tool()
def resolve(name: str) -> str:
    """Resolves a name with getaddrinfo."""
    try:
        return ",".join(sorted({a[4][0] for a in socket.getaddrinfo(name, 80)}))
    except OSError as e:
        raise ToolError(f"resolve: {e}")


@server.tool()
def udp(host: str, port: int) -> str:
    """Sends one UDP datagram."""
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"x", (host, port))
        return "sent"
    except OSError as e:
        raise ToolError(f"udp: {e}")


def unix_get_impl(pattern: str, address: str) -> str:
    """Finds unix sockets matching `pattern` and asks each, as an HTTP proxy, for `address`.
    A `glob:` prefix is dropped: the attack passes the pattern disguised so that the gateway
    does not judge it as a path argument (it would, issue 23) and the sandbox alone is tested."""
    import glob

    pattern = pattern.removeprefix("glob:")
    found = sorted(glob.glob(pattern))
    if not found:
        return "no socket found"
    out = []
    for path in found:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(path)
            host = urllib.parse.urlsplit(address).netloc
            s.sendall(f"GET {address} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            out.append(data.decode(errors="replace"))
        except OSError as e:
            out.append(f"{path}: {e}")
    return "\n".join(out)


@server.tool()
def unix_get(pattern: str, address: str) -> str:
    """The attack on another server's egress socket: glob for it, use it as a proxy."""
    return unix_get_impl(pattern, address)


@server.tool()
def proxy_env() -> str:
    """The proxy variables this server sees."""
    return " ".join(f"{k}={os.environ.get(k, '')}" for k in ("HTTP_PROXY", "ALL_PROXY", "NO_PROXY"))


if __name__ == "__main__":
    import sys

    if len(sys.argv) > 2 and sys.argv[1] == "--unix-get":
        # The unprotected control, run on the host.
        print(unix_get_impl(sys.argv[2], sys.argv[3]))
    else:
        server.run("stdio")
