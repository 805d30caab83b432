"""refserver.py - a fork server for the test references: the suite runs several hundred reference
programs (tests/tools/*.py), and each used to spend 3-10 s importing torch, transformers and peft
before doing a fraction of a second of work. This process imports them once, listens on a Unix
socket, and for every request forks a child that runs the requested script exactly as
`python SCRIPT ARGS...` would: the client's argv, working directory, environment, and its stdin,
stdout and stderr (passed as file descriptors), sys.path[0] the script's directory, run as
__main__; the child's exit status goes back to the client (refclient.py), which exits with it.

Each request is its own forked process, so nothing a script does (seeds, default dtype, warning
filters, threads) reaches another. The parent never runs a torch operation, so no thread pool
exists at fork time. The environment is the client's, but what the imported libraries read at
import (OMP_NUM_THREADS, for one) is the server's: scripts/with-refs-server.sh starts it with the
test command's environment.

usage: python refserver.py SOCKET_PATH   (prints "ready" on stdout once it listens)
"""
import os
import runpy
import signal
import socket
import struct
import sys
import traceback

# The imports every reference shares; what one script needs beyond these it imports itself.
import numpy  # noqa: F401
import torch  # noqa: F401
import safetensors.torch  # noqa: F401
import transformers  # noqa: F401
import tokenizers  # noqa: F401
import peft  # noqa: F401


def recv_exact(conn, n):
    buf = b""
    while len(buf) < n:
        part = conn.recv(n - len(buf))
        if not part:
            raise EOFError("client went away")
        buf += part
    return buf


def run_child(conn):
    """In the forked child: take the request, become the client's process, run the script."""
    msg, fds, _, _ = socket.recv_fds(conn, 8, 3)
    if len(msg) < 8 or len(fds) != 3:
        os._exit(70)
    (length,) = struct.unpack("<Q", msg[:8])
    body = msg[8:] + recv_exact(conn, length - (len(msg) - 8))
    parts = body.split(b"\0")
    n_args = int(parts[0])
    cwd = os.fsdecode(parts[1])
    args = [os.fsdecode(a) for a in parts[2:2 + n_args]]
    env = {}
    for kv in parts[2 + n_args:]:
        if b"=" in kv:
            k, v = kv.split(b"=", 1)
            env[os.fsdecode(k)] = os.fsdecode(v)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    script = args[0]
    sys.argv = list(args)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    try:
        conn.sendall(struct.pack("<i", code))
    except OSError:
        pass
    os._exit(code & 0xFF)


def main():
    path = sys.argv[1]
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    print("ready", flush=True)
    while True:
        conn, _ = srv.accept()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            srv.close()
            try:
                run_child(conn)
            finally:
                os._exit(70)
        conn.close()


if __name__ == "__main__":
    main()
