"""Interleaved launch cost of a few commands: wall time and the reaped child's CPU time.

Usage: python3 scripts/launch_rusage.py ROUNDS NAME=COMMAND... (docs/benchmarks.md, issue 15).
The child's CPU time (rusage of wait4) includes the page-table copy of this Python fork.
"""
import os, sys, time, statistics
rounds = int(sys.argv[1]); variants = {}
for spec in sys.argv[2:]:
    name, cmd = spec.split("=", 1); variants[name] = cmd.split()
devnull = os.open("/dev/null", os.O_RDWR)
def once(argv):
    t0 = time.perf_counter_ns()
    pid = os.fork()
    if pid == 0:
        os.dup2(devnull, 1); os.dup2(devnull, 2)
        try: os.execv(argv[0], argv)
        finally: os._exit(127)
    _, st, ru = os.wait4(pid, 0)
    wall = (time.perf_counter_ns() - t0) / 1e6
    assert os.waitstatus_to_exitcode(st) == 0, argv
    return wall, (ru.ru_utime + ru.ru_stime) * 1e3
data = {k: ([], []) for k in variants}
for argv in variants.values(): once(argv)
for _ in range(rounds):
    for k, argv in variants.items():
        w, c = once(argv); data[k][0].append(w); data[k][1].append(c)
def q(xs, p): xs = sorted(xs); return xs[min(len(xs) - 1, int(p * len(xs)))]
print("| | CPU median | CPU p10 | wall median | wall p10 | wall min |")
print("|---|---|---|---|---|---|")
for k, (w, c) in data.items():
    print("| %s | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.2f ms |" % (k, statistics.median(c), q(c, .1), statistics.median(w), q(w, .1), min(w)))
