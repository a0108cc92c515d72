#!/usr/bin/python3
"""A hostile program: tries every escape the sandbox must stop and reports what worked.

Usage: hostile.py CONFIG_JSON   (one argument: the JSON the test passes; see tests/sandbox/hostile.rs)
Prints one JSON object on stdout: {attack: {"ok": bool, "detail": str}}. "ok" means the
attack SUCCEEDED. Each attack runs in a forked child so that one attack (a user namespace,
a mount namespace) cannot change the conditions of the next. Only the standard library and
ctypes: it must run with nothing but /usr visible.
"""
import ctypes
import fcntl
import json
import os
import socket
import sys
import termios

# Run as a program: the JSON is argv[1]. Imported (tests/attacks/hostile_server.py): the
# importer fills CFG and MARKER in before calling any attack.
CFG = json.loads(sys.argv[1]) if __name__ == "__main__" else {}
LIBC = ctypes.CDLL(None, use_errno=True)
# The marker planted in secrets and in a host process's command line. It arrives reversed so
# that no command line in the sandbox (this program's, or bwrap's as PID 1) contains it.
MARKER = CFG.get("marker_reversed", "")[::-1]


def err():
    return os.strerror(ctypes.get_errno())


def read_file(path, needle=None):
    with open(path, "rb") as f:
        data = f.read(65536)
    if needle is not None and needle.encode() not in data:
        return False, "read, but the marker is not there"
    return len(data) > 0, "read %d bytes" % len(data)


def write_file(path):
    with open(path, "w") as f:
        f.write("planted by hostile.py\n")
    return True, "wrote " + path


def connect(family, addr):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(addr)
    s.close()
    return True, "connected"


def host_process():
    pid = CFG["host_pid"]
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        cmd = f.read()
    if MARKER.encode() in cmd:
        return True, "saw host pid %d" % pid
    return False, "pid %d exists but is another process" % pid


def own_env():
    canary = CFG["canary"]
    hits = [k for k, v in os.environ.items() if canary in v]
    return bool(hits), "variables: %s" % (hits or "none")


def parent_env():
    canary = CFG["canary"].encode()
    found = []
    for pid in sorted({os.getppid(), 1}):
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                if canary in f.read():
                    found.append(pid)
        except OSError as e:
            pass
    return bool(found), "canary in environ of pids %s" % (found or "none")


def inherited_fd():
    listing = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
    fds = [int(x) for x in os.listdir(listing) if int(x) > 2 and int(x) != listing]
    os.close(listing)
    found = []
    for fd in fds:
        try:
            found.append("%d->%s" % (fd, os.readlink("/proc/self/fd/%d" % fd)))
        except OSError:
            pass  # closed meanwhile: the descriptor os.listdir used internally
    return bool(found), "open fds above 2: %s" % (found or "none")


CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2


def user_namespace():
    if LIBC.unshare(CLONE_NEWUSER) == 0:
        return True, "unshare(CLONE_NEWUSER) succeeded"
    return False, "unshare(CLONE_NEWUSER): " + err()


def mount():
    target = CFG["mount_target"].encode()
    # A private mount namespace first, so that the unsandboxed control run never changes the
    # host's mounts; inside the sandbox this fails and the mount is tried directly.
    if LIBC.unshare(CLONE_NEWNS) == 0:
        LIBC.mount(None, b"/", None, MS_REC | MS_PRIVATE, None)
    if LIBC.mount(b"tmpfs", target, b"tmpfs", 0, None) == 0:
        LIBC.umount2(target, MNT_DETACH)
        return True, "mounted a tmpfs"
    return False, "mount: " + err()


def vsock():
    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    s.close()
    return True, "AF_VSOCK socket created"


def io_uring():
    params = ctypes.create_string_buffer(120)
    fd = LIBC.syscall(425, 4, params)  # same number on x86_64 and aarch64
    if fd >= 0:
        os.close(fd)
        return True, "io_uring_setup returned a ring"
    return False, "io_uring_setup: " + err()


def keyring():
    KEY_SPEC_PROCESS_KEYRING = -2
    nr = 248 if os.uname().machine == "x86_64" else 217
    key = LIBC.syscall(nr, b"user", b"palisade-hostile", b"x", 1, ctypes.c_int(KEY_SPEC_PROCESS_KEYRING))
    if key >= 0:
        return True, "add_key created key %d" % key
    return False, "add_key: " + err()


def tiocsti():
    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSTI, b"x")
        return True, "TIOCSTI injected a byte"
    finally:
        os.close(master)
        os.close(slave)


def list_sys():
    entries = os.listdir("/sys/class/net")
    return bool(entries), "listed /sys/class/net: %s" % entries


ATTACKS = {
    "read_secret": lambda: read_file(CFG["secret"], MARKER),
    "read_ssh_key": lambda: read_file(CFG["ssh_key"], MARKER),
    "read_etc_shadow": lambda: read_file("/etc/shadow"),
    "write_outside_grants": lambda: write_file(CFG["outside_write"]),
    "write_into_ro_grant": lambda: write_file(CFG["ro_write"]),
    "plant_bashrc_in_home": lambda: write_file(CFG["bashrc"]),
    "see_host_process": host_process,
    "launcher_env_in_own_env": own_env,
    "launcher_env_via_proc_environ": parent_env,
    "inherited_fd": inherited_fd,
    "tcp_to_host_loopback": lambda: connect(socket.AF_INET, ("127.0.0.1", CFG["tcp_port"])),
    "host_unix_socket": lambda: connect(socket.AF_UNIX, CFG["unix_socket"]),
    "abstract_unix_socket": lambda: connect(socket.AF_UNIX, "\0" + CFG["abstract_name"]),
    "create_user_namespace": user_namespace,
    "mount_filesystem": mount,
    "af_vsock_socket": vsock,
    "io_uring_setup": io_uring,
    "kernel_keyring": keyring,
    "tiocsti_injection": tiocsti,
    "read_sys": list_sys,
}


def run_isolated(fn):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            ok, detail = fn()
        except Exception as e:  # the attack failing is the expected sandboxed outcome
            ok, detail = False, "%s: %s" % (type(e).__name__, e)
        os.write(w, json.dumps({"ok": bool(ok), "detail": str(detail)}).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    try:
        return json.loads(data)
    except ValueError:
        return {"ok": False, "detail": "attack process died without a report"}


def main():
    # Look at the inherited descriptors before anything here opens its own (the pipes of
    # run_isolated would show up otherwise).
    ok, detail = inherited_fd()
    fd_result = {"ok": ok, "detail": detail}
    results = {}
    for name, fn in ATTACKS.items():
        results[name] = fd_result if name == "inherited_fd" else run_isolated(fn)
    json.dump(results, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
