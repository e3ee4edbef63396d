#!/usr/bin/env python3
"""test_slow_reader.py -- examples/http_server and a client that reads slowly.

    test_slow_reader.py HTTP_SERVER [REQUESTS]

One connection: a thread writes REQUESTS (default 100000) pipelined
`GET /` requests while the main thread reads the answers a few KB at a
time with a short pause after each read, through a small receive buffer.
The server's responses then meet a full socket buffer over and over (a
short write, then EAGAIN); every response byte must still arrive, in
order: the byte count and the content are compared with REQUESTS copies of
the one expected response, and after the client's half-close the server
must close without sending anything more.  Nothing here depends on timing:
the pauses only make the reader slow.  Exit 0 pass, 1 fail.
"""
import os
import socket
import subprocess
import sys
import threading
import time

REQUEST = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"
BODY = b"hello from libevl\n"
RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n"
            % len(BODY)) + BODY
READ_SIZE = 4096          # bytes per recv
PAUSE = 0.0005            # seconds after each recv
RCVBUF = 16384            # the client's receive buffer (the kernel doubles it)


def fail(msg):
    print(f"FAIL slow_reader: {msg}")
    sys.exit(1)


def main():
    server = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
    p = subprocess.Popen([server, "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        if not line.startswith("pid "):
            fail(f"http_server printed {line!r}")
        port = int(p.stdout.readline().split()[1])
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Set before connecting: the window is fixed at the handshake.
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        c.settimeout(60)          # a hang is a failure, not a wait
        c.connect(("127.0.0.1", port))
        send_err = []

        def sender():
            try:
                c.sendall(REQUEST * n)
            except OSError as e:
                send_err.append(e)

        t = threading.Thread(target=sender, daemon=True)
        t.start()
        want = len(RESPONSE) * n
        got = bytearray()
        while len(got) < want:
            try:
                chunk = c.recv(min(READ_SIZE, want - len(got)))
            except OSError as e:
                fail(f"recv after {len(got)} of {want} bytes "
                     f"({len(got) // len(RESPONSE)} responses): {e}")
            if not chunk:
                fail(f"connection closed after {len(got)} of {want} bytes "
                     f"({len(got) // len(RESPONSE)} whole responses of {n})")
            got += chunk
            time.sleep(PAUSE)
        t.join(60)
        if t.is_alive() or send_err:
            fail(f"the requests did not all go out: {send_err or 'sender still running'}")
        count = got.count(b"HTTP/1.1 200 OK\r\n")
        if count != n:
            fail(f"{count} responses in {len(got)} bytes, expected {n}")
        if bytes(got) != RESPONSE * n:
            i = next(i for i in range(len(got)) if got[i] != (RESPONSE * n)[i])
            fail(f"content differs from {n} copies of the response at byte {i}")
        c.shutdown(socket.SHUT_WR)   # the server sees EOF and closes
        extra = c.recv(READ_SIZE)
        if extra:
            fail(f"{len(extra)} bytes after the last expected response: {extra[:80]!r}")
        c.close()
        print(f"ok slow_reader: {n} responses, {len(got)} bytes, read {READ_SIZE} bytes at a time")
        return 0
    finally:
        p.kill()
        p.wait()


if __name__ == "__main__":
    sys.exit(main())
