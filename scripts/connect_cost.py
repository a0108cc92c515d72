#!/usr/bin/env python3
"""What palisade's connect checks cost a Landlock server with an allowlist: the time of one
TCP connect (and close) to its egress proxy endpoint, checked by palisade (enforce) beside the
same connect held by Landlock's port rule alone (warn, palisade started under a seccomp
filter that refuses pidfd_getfd, so it cannot check connects). Rounds alternate the two.

Usage: scripts/connect_cost.py PALISADE [CONNECTS] [ROUNDS]
Prints the median and p90 of the per-round medians, in microseconds per connect.
"""
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile

INSIDE = r'''
import os, socket, statistics, sys, time, urllib.parse
port = urllib.parse.urlparse(os.environ["HTTP_PROXY"]).port
n = int(sys.argv[1])
times = []
for _ in range(n):
    s = socket.socket()
    t = time.perf_counter_ns()
    s.connect(("127.0.0.1", port))
    times.append(time.perf_counter_ns() - t)
    s.close()
print(statistics.median(times) / 1000)
'''


def refuse_pidfd_getfd():
    """In the child before exec: no_new_privs and a filter refusing pidfd_getfd (438)."""
    libc = ctypes.CDLL(None, use_errno=True)

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    ins = (Filter * 4)(Filter(0x20, 0, 0, 0), Filter(0x15, 0, 1, 438), Filter(0x06, 0, 0, 0x50001), Filter(0x06, 0, 0, 0x7FFF0000))
    prog = Prog(4, ins)
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.syscall(317, 1, 0, ctypes.byref(prog)) != 0:
        os._exit(99)


def one(palisade, script_dir, checked, connects):
    policy = "enforce" if checked else "warn"
    argv = [palisade, "run", "--backend", "landlock", "--sandbox-policy", policy,
            "--allow-domain", "example.com", "--ro", script_dir, "--",
            "/usr/bin/python3", os.path.join(script_dir, "inside.py"), str(connects)]
    # palisade clears the environment: the count goes as an argument.
    out = subprocess.run(argv, capture_output=True,
                         text=True, preexec_fn=None if checked else refuse_pidfd_getfd, check=True)
    return float(out.stdout.strip())


def main():
    palisade = sys.argv[1]
    connects = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "inside.py"), "w") as f:
            f.write(INSIDE)
        got = {True: [], False: []}
        for _ in range(rounds):
            for checked in (True, False):
                got[checked].append(one(palisade, d, checked, connects))
    for checked, name in ((False, "port rule only (warn)"), (True, "checked by palisade (enforce)")):
        v = sorted(got[checked])
        print(f"{name:32} median {statistics.median(v):7.1f} us  p90 {v[int(len(v) * 0.9) - 1]:7.1f} us  ({rounds} rounds x {connects} connects)")


if __name__ == "__main__":
    main()
