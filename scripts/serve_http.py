"""Starts `palisade serve --http 127.0.0.1:0` for the scripts that drive the HTTP front, and
returns the port the kernel gave it, read from the front's `listening on` log line.

Why not pick a free port and pass it: between the probe's release and palisade's bind, any
other process may take it (tests/support/http_front.rs does the same for the test suite).
"""
import os
import re
import subprocess
import time

LISTENING = re.compile(r"listening on http://127\.0\.0\.1:([0-9]+)/mcp")
# Warnings as usual, plus the front's one info line saying where it listens.
LOG_FILTER = "warn,palisade::gateway::agent::http=info"


def start_on_any_port(argv, log_path, timeout=20.0):
    """Runs `argv` (a `palisade serve ...` without `--http`) on 127.0.0.1:0, its stderr in
    `log_path`; returns (process, port). Raises RuntimeError with the log when it exits or
    does not say where it listens within `timeout` (the process is killed then)."""
    env = dict(os.environ, RUST_LOG=LOG_FILTER)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(list(argv) + ["--http", "127.0.0.1:0"], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=log)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with open(log_path) as f:
            m = LISTENING.search(f.read())
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    with open(log_path) as f:
        raise RuntimeError("%s did not say where it listens:\n%s" % (argv[0], f.read()))
