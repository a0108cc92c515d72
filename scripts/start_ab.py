#!/usr/bin/env python3
"""Two palisade binaries side by side: spawn of `palisade serve` to its `initialize` answer,
for the fs-server and server-filesystem, beside each server started directly (issue 18's
start target). Interleaved rounds; prints the summary of each variant. A benchmark, not a
test: it asserts nothing.

Usage (from the repository root; bench.py reads its inputs from the environment):
    PALISADE=NEW DEPS=target/test-deps ROOT=$PWD CMDLINE=x \\
        python3 scripts/start_ab.py OLD_BINARY NEW_BINARY [ROUNDS]
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

OLD, NEW = sys.argv[1], sys.argv[2]
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 21


def main():
    with tempfile.TemporaryDirectory() as work:
        s = bench.Setup(work)
        variants = {}
        for key, label in (("fs", "fs-server"), ("sfs", "server-filesystem")):
            variants[(label, "direct")] = s.fs_server() if key == "fs" else s.server_filesystem()
            for tag, binary in (("old", OLD), ("new", NEW)):
                bench.PALISADE = binary
                variants[(label, "serve " + tag)] = s.serve_config(key, name="cfg" + tag)
        samples = {k: [] for k in variants}
        for cmd in variants.values():  # warm-up
            bench.Server(cmd).close()
        for _ in range(ROUNDS):
            for k, cmd in variants.items():
                srv = bench.Server(cmd)
                samples[k].append(srv.ms)
                srv.close()
        for k, xs in samples.items():
            print(k, bench.summary(xs, "ms"))


if __name__ == "__main__":
    main()
