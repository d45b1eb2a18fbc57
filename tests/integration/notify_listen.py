#!/usr/bin/env python3
"""A stand-in for systemd's notification socket: binds SOCKET (a datagram socket, as
NOTIFY_SOCKET names) and appends every message it receives to LOG, one line each, as
"<monotonic seconds> <message with newlines as |>", until killed.

usage: notify_listen.py SOCKET LOG
"""
import socket
import sys
import time


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(argv[1])
    with open(argv[2], "a", buffering=1) as log:
        while True:
            data = sock.recv(4096)
            log.write("%.3f %s\n" % (time.monotonic(), data.decode("utf-8", "replace").strip().replace("\n", "|")))


if __name__ == "__main__":
    main(sys.argv)
