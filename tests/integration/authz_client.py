#!/usr/bin/env python3
"""A raw D-Bus client for authz_test.sh: one method call, written byte by byte.

busctl and dbus-send check their arguments (UTF-8, no NUL) before anything is sent and always
wait for the reply; this client does neither, so the test can show that the bus, not vfiod,
rejects invalid strings, and can leave before vfiod answers.

usage: authz_client.py SOCKET MODE PATH INTERFACE.MEMBER SIGNATURE [ARG...]
  MODE  call        wait for the reply; print "ok" or the error name, a tab, and the first
                    string of the reply (the error message), newlines as \\n
        disconnect  send the call (reply expected), then close the connection at once
        noreply     send it flagged NO_REPLY_EXPECTED and close
        linger:S    send the call, wait S seconds without reading, then close
        flood:C:N   open C connections at once, send N calls on each without waiting, then
                    collect every reply; print one "NAME COUNT" line per reply kind
  SIGNATURE is made of 's' and 'u'; an 's' ARG is sent as the bytes of the command-line
  argument (invalid UTF-8 included), or as hex after "hex:" (for NUL bytes).
Exit 0 when the exchange happened as asked; "disconnected" is printed when the bus hung up.
"""
import os
import socket
import struct
import sys
import time

METHOD_CALL, METHOD_RETURN, ERROR = 1, 2, 3
NO_REPLY_EXPECTED = 0x1
F_PATH, F_INTERFACE, F_MEMBER, F_ERROR_NAME, F_REPLY_SERIAL, F_DESTINATION = 1, 2, 3, 4, 5, 6
F_SIGNATURE = 8


def pad(buf, n):
    return buf + b"\0" * (-len(buf) % n)


def put_string(buf, raw):
    return pad(buf, 4) + struct.pack("<I", len(raw)) + raw + b"\0"


class Conn:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(20)
        self.sock.connect(path)
        uid = str(os.getuid()).encode().hex().encode()
        self.sock.sendall(b"\0AUTH EXTERNAL " + uid + b"\r\n")
        line = b""
        while not line.endswith(b"\r\n"):
            c = self.sock.recv(1)
            if not c:
                raise SystemExit("authz_client: the bus closed during authentication")
            line += c
        if not line.startswith(b"OK "):
            raise SystemExit("authz_client: authentication refused: %r" % line)
        self.sock.sendall(b"BEGIN\r\n")
        self.serial = 0
        self.pending = b""
        kind, _, _ = self.reply(self.send("/org/freedesktop/DBus", "org.freedesktop.DBus", "Hello",
                                          "", [], dest="org.freedesktop.DBus"))
        if kind != "ok":
            raise SystemExit("authz_client: Hello failed")

    def send(self, path, interface, member, sig, args, dest="org.vfiod1", flags=0):
        body = b""
        for t, a in zip(sig, args):
            body = put_string(body, a) if t == "s" else pad(body, 4) + struct.pack("<I", a)
        self.serial += 1
        head = struct.pack("<cBBBII", b"l", METHOD_CALL, flags, 1, len(body), self.serial)
        fields = [(F_PATH, b"o", path.encode()), (F_INTERFACE, b"s", interface.encode()),
                  (F_MEMBER, b"s", member.encode()), (F_DESTINATION, b"s", dest.encode())]
        if sig:
            fields.append((F_SIGNATURE, b"g", sig.encode()))
        arr = head + b"\0\0\0\0"  # the array length, filled in below
        for code, t, value in fields:
            arr = pad(arr, 8) + bytes([code, 1]) + t + b"\0"
            arr = (arr + bytes([len(value)]) + value + b"\0") if t == b"g" else put_string(arr, value)
        arr = arr[:12] + struct.pack("<I", len(arr) - 16) + arr[16:]
        self.sock.sendall(pad(arr, 8) + body)
        return self.serial

    def read_exact(self, n):
        while len(self.pending) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError
            self.pending += chunk
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def message(self):
        """(kind, header fields, body) of the next message on the connection."""
        fixed = self.read_exact(16)
        e = "<" if fixed[:1] == b"l" else ">"
        kind = fixed[1]
        body_len, _, fields_len = struct.unpack(e + "III", fixed[4:16])
        rest = self.read_exact((-(16 + fields_len) % 8) + fields_len + body_len)
        msg = fixed + rest
        fields, o = {}, 16
        while o < 16 + fields_len:
            o += -o % 8
            code, slen = msg[o], msg[o + 1]
            t = msg[o + 2:o + 2 + slen]
            o += 3 + slen
            if t == b"u":
                o += -o % 4
                fields[code] = struct.unpack(e + "I", msg[o:o + 4])[0]
                o += 4
            elif t == b"g":
                n = msg[o]
                fields[code] = msg[o + 1:o + 1 + n].decode()
                o += n + 2
            else:  # s, o
                o += -o % 4
                n = struct.unpack(e + "I", msg[o:o + 4])[0]
                fields[code] = msg[o + 4:o + 4 + n].decode("utf-8", "replace")
                o += n + 5
        body = msg[len(msg) - body_len:]
        first = ""
        if fields.get(F_SIGNATURE, "").startswith("s"):
            n = struct.unpack(e + "I", body[:4])[0]
            first = body[4:4 + n].decode("utf-8", "replace")
        return kind, fields, first

    def reply(self, serial):
        """("ok"|error name, message, first string of the body) of the reply to `serial`."""
        while True:
            kind, fields, first = self.message()
            if kind not in (METHOD_RETURN, ERROR) or fields.get(F_REPLY_SERIAL) != serial:
                continue  # a signal, or someone else's reply
            if kind == ERROR:
                return fields.get(F_ERROR_NAME, "?"), first, first
            return "ok", first, first

    def replies(self, serials):
        """How many replies to `serials` were each kind ("ok" or the error name)."""
        waiting, counts = set(serials), {}
        while waiting:
            kind, fields, _ = self.message()
            serial = fields.get(F_REPLY_SERIAL)
            if kind not in (METHOD_RETURN, ERROR) or serial not in waiting:
                continue
            waiting.discard(serial)
            name = "ok" if kind == METHOD_RETURN else fields.get(F_ERROR_NAME, "?")
            counts[name] = counts.get(name, 0) + 1
        return counts


def flood(sock, conns, per, path, interface, member, sig, args):
    """Many callers at once, each with many calls in flight: what a local user can do."""
    cs = [Conn(sock) for _ in range(conns)]
    sent = [[c.send(path, interface, member, sig, args) for _ in range(per)] for c in cs]
    total = {}
    for c, serials in zip(cs, sent):
        for name, n in c.replies(serials).items():
            total[name] = total.get(name, 0) + n
    for name in sorted(total):
        print(name, total[name])


def main(argv):
    if len(argv) < 6:
        sys.exit(__doc__)
    sock, mode, path, method, sig = argv[1:6]
    interface, _, member = method.rpartition(".")
    args = []
    for t, a in zip(sig, argv[6:]):
        if t == "s":
            args.append(bytes.fromhex(a[4:]) if a.startswith("hex:") else os.fsencode(a))
        else:
            args.append(int(a))
    if mode.startswith("flood:"):
        _, c, n = mode.split(":")
        flood(sock, int(c), int(n), path, interface, member, sig, args)
        return
    conn = Conn(sock)
    flags = NO_REPLY_EXPECTED if mode == "noreply" else 0
    try:
        serial = conn.send(path, interface, member, sig, args, flags=flags)
        if mode.startswith("linger:"):
            time.sleep(float(mode.split(":")[1]))
        if mode != "call":
            conn.sock.close()
            print("sent")
            return
        kind, message, _ = conn.reply(serial)
    except (EOFError, ConnectionResetError, BrokenPipeError):
        print("disconnected")
        return
    except socket.timeout:
        print("timeout")
        sys.exit(1)
    print("%s\t%s" % (kind, message.replace("\n", "\\n")))


if __name__ == "__main__":
    main(sys.argv)
