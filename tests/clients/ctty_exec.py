"""Runs a command with a given terminal as its controlling terminal, the way a developer's shell
would, while its stdin and stdout stay the pipes of whoever started us (the MCP stdio).

usage: ctty_exec.py TTY STDOUT_COPY -- COMMAND ARGS...

- makes TTY (a pseudo-terminal's slave, owned by the test driver) the controlling terminal of
  this process's session (a new one unless we already lead one) with TIOCSCTTY;
- runs COMMAND in that session: its /dev/tty is TTY; stdin and stderr are inherited;
- copies COMMAND's stdout to our stdout and to the file STDOUT_COPY, so the test can check
  that nothing but JSON-RPC was ever written on the MCP channel.
Exits with COMMAND's status.
"""

import fcntl
import os
import subprocess
import sys
import termios


def main():
    tty, copy = sys.argv[1], sys.argv[2]
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    if os.getsid(0) != os.getpid():
        os.setsid()
    fd = os.open(tty, os.O_RDWR | os.O_NOCTTY)
    fcntl.ioctl(fd, termios.TIOCSCTTY, 0)
    os.close(fd)
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    out = sys.stdout.buffer
    with open(copy, "wb") as f:
        while True:
            chunk = os.read(child.stdout.fileno(), 65536)
            if not chunk:
                break
            f.write(chunk)
            f.flush()
            out.write(chunk)
            out.flush()
    sys.exit(child.wait())


if __name__ == "__main__":
    main()
