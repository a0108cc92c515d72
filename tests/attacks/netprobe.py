#!/usr/bin/python3
"""The ways a sandboxed process may try to get past its network allowlist, in one place.

Imported by the hostile MCP server (tests/attacks/hostile_server.py: the allowlist rows of the
attack x tier table in tests/attacks/allowlist.rs) and run as a program by the Landlock egress test
(tests/egress_gateway/landlock.rs, under `palisade run --backend landlock --allow-domain ...`).
Only the standard library: it must run with nothing but /usr visible.

A proxy is named by a URL (`http://user:secret@127.0.0.1:PORT`, `socks5h://...`, as in the
proxy variables palisade gives a server); `creds` is (user, password) or None for none.

usage as a program: netprobe.py ORIGIN_PORT UDP_PORT ALLOWED_URL
Prints one JSON object: each probe's answer, or "error: TYPE: TEXT". The proxy rows only when
HTTP_PROXY is set (inside the sandbox).
"""

import base64
import json
import os
import socket
import struct
import sys
import urllib.parse

TIMEOUT = 20


def creds_of(proxy_url):
    """The (user, password) a proxy URL carries, or None."""
    p = urllib.parse.urlsplit(proxy_url)
    return (p.username, p.password or "") if p.username else None


def _endpoint(proxy_url):
    p = urllib.parse.urlsplit(proxy_url)
    return p.hostname, p.port


def read_response(s):
    """An HTTP response: the head, then Content-Length bytes of body (or up to the close)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            return data.decode(errors="replace")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = None
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v.strip())
    while length is None or len(body) < length:
        chunk = s.recv(4096)
        if not chunk:
            break
        body += chunk
    return (head + b"\r\n\r\n" + body).decode(errors="replace")


def _get(s, target, host, creds=None):
    auth = ""
    if creds is not None:
        token = base64.b64encode(("%s:%s" % creds).encode()).decode()
        auth = "Proxy-Authorization: Basic %s\r\n" % token
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n" % (target, host, auth)).encode())
    return read_response(s)


def http_via_proxy(proxy_url, url, creds):
    """GET `url` through the HTTP proxy at `proxy_url`'s host and port, presenting `creds`."""
    s = socket.create_connection(_endpoint(proxy_url), timeout=TIMEOUT)
    try:
        return _get(s, url, urllib.parse.urlsplit(url).netloc, creds)
    finally:
        s.close()


def socks_handshake(proxy_url, creds):
    """RFC 1928 greeting offering no authentication, or RFC 1929 username/password: the socket
    and the proxy's replies, hex ("05ff": no acceptable method, "05020101": credentials refused,
    "05020100": accepted)."""
    s = socket.create_connection(_endpoint(proxy_url), timeout=TIMEOUT)
    s.sendall(b"\x05\x01" + (b"\x00" if creds is None else b"\x02"))
    got = s.recv(2)
    if creds is not None and got == b"\x05\x02":
        u, w = creds[0].encode(), creds[1].encode()
        s.sendall(b"\x01" + bytes([len(u)]) + u + bytes([len(w)]) + w)
        got += s.recv(2)
    return s, got.hex()


def socks_get(proxy_url, url, creds):
    """GET `url` through the SOCKS5 proxy (the name resolved by the proxy), presenting `creds`."""
    u = urllib.parse.urlsplit(url)
    s, replies = socks_handshake(proxy_url, creds)
    try:
        if replies not in ("0500", "05020100"):
            return "socks5 handshake refused: %s" % replies
        name = u.hostname.encode()
        s.sendall(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + struct.pack(">H", u.port or 80))
        reply = s.recv(4)
        if len(reply) < 4 or reply[1] != 0:
            return "socks5 connect refused: reply %s" % reply.hex()
        atyp = reply[3]
        s.recv({1: 4, 4: 16}.get(atyp, 0) + 2 if atyp != 3 else s.recv(1)[0] + 2)
        return _get(s, u.path or "/", u.netloc)
    finally:
        s.close()


def direct_get(port, url):
    """GET `url` from 127.0.0.1:`port` itself, no proxy (its Host header says which name)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    try:
        u = urllib.parse.urlsplit(url)
        return _get(s, u.path or "/", u.netloc)
    finally:
        s.close()


def direct_connect(port):
    socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT).close()
    return "connected"


def udp_send(port, payload=b"probe"):
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(payload, ("127.0.0.1", port))
    return "sent"


def listen(port=0):
    """A listening TCP socket on 127.0.0.1:`port` (0: any); listen() alone binds an unbound
    socket, without bind(2)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if port:
        s.bind(("127.0.0.1", port))
    s.listen(1)
    return s


def fastopen_get(port, url):
    """GET through a TCP Fast Open connect to 127.0.0.1:`port` (sendto with MSG_FASTOPEN
    connects without connect(2)). Blocking: a non-blocking Fast Open connect answers
    EINPROGRESS."""
    s = socket.socket()
    try:
        u = urllib.parse.urlsplit(url)
        req = "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (u.path or "/", u.netloc)
        s.sendto(req.encode(), socket.MSG_FASTOPEN, ("127.0.0.1", port))
        s.settimeout(TIMEOUT)
        return read_response(s)
    finally:
        s.close()


def status_line(response):
    return response.split("\r\n", 1)[0]


def main():
    origin, udp_port, allowed = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    out = {}

    def row(name, f):
        try:
            out[name] = f()
        except Exception as e:  # the text is what the test reads
            out[name] = "error: %s: %s" % (type(e).__name__, e)

    def get(url):  # a standard client, told the way out by the proxy variables
        import urllib.request

        with urllib.request.urlopen(url, timeout=TIMEOUT) as r:
            return r.read().decode()

    proxy = os.environ.get("HTTP_PROXY")
    if proxy:
        socks = os.environ["ALL_PROXY"]
        mine = creds_of(proxy)
        wrong = ("palisade", "0" * 48)
        out["secret"] = mine[1]
        row("allowed", lambda: get(allowed))
        row("denied", lambda: get(allowed.replace("allowed.test", "denied.test")))
        row("no_secret", lambda: status_line(http_via_proxy(proxy, allowed, None)))
        row("wrong_secret", lambda: status_line(http_via_proxy(proxy, allowed, wrong)))
        row("with_secret", lambda: status_line(http_via_proxy(proxy, allowed, mine)))
        for name, creds in (("socks_no_auth", None), ("socks_wrong_secret", wrong), ("socks_with_secret", mine)):
            row(name, lambda creds=creds: socks_handshake(socks, creds)[1])
    row("direct", lambda: direct_connect(origin))
    row("udp", lambda: udp_send(udp_port))
    row("listen", lambda: "listening on %d" % listen().getsockname()[1])
    row("fastopen", lambda: status_line(fastopen_get(origin, "http://127.0.0.1:%d/tfo" % origin)))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
