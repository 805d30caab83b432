"""refclient.py - run a reference program through refserver.py when one is listening
($GTRAIN_REFS_SOCK), else exactly as the Python it was started with would (exec). Run by the
tests/tools/refpy wrapper with -S (no site packages: it starts in milliseconds). Only the form
`refpy SCRIPT.py ARGS...` goes to the server; anything else (-c, -m, no script) is exec'd."""
import os
import socket
import struct
import sys


def direct():
    py = os.environ.get("GTRAIN_REFS_PY_REAL")
    os.execv(py, [py] + sys.argv[1:])


def main():
    args = sys.argv[1:]
    sock_path = os.environ.get("GTRAIN_REFS_SOCK")
    if not sock_path or not args or args[0].startswith("-") or not args[0].endswith(".py"):
        direct()
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(sock_path)
    except OSError:
        direct()
    env = [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in os.environ.items()]
    body = b"\0".join([str(len(args)).encode(), os.fsencode(os.getcwd())] + [os.fsencode(a) for a in args] + env)
    socket.send_fds(conn, [struct.pack("<Q", len(body)) + body], [0, 1, 2])
    got = b""
    while len(got) < 4:
        part = conn.recv(4 - len(got))
        if not part:
            sys.stderr.write("refclient: the reference server ended %s without an exit status\n" % args[0])
            sys.exit(70)
        got += part
    sys.exit(struct.unpack("<i", got)[0] & 0xFF)


if __name__ == "__main__":
    main()
