#!/usr/bin/env python3
"""test_windows.py -- a fresh generic recording's windows add up (needs root).

    test_windows.py CASE --loopscope BIN

examples/asyncio_server.py (the demo's generic target) recorded by pid as
examples/demo.sh does: requests that block the loop off-CPU (/report) and
on-CPU (/checksum), then the loop left idle for about 1.5 s until the
recording stops.  Then:

- every window's busy + wait equals its span, to the nanosecond, and every
  blocking episode lies inside one window's busy time
  (tests/viewer/windows_check.py says why exact);
- the last window, open when the recording stopped, holds the idle tail as
  wait: it spans at least the idle time, almost all of it waiting, and the
  timeline draws it waiting ('.'), not busy or unknown;
- info, timeline (terminal and SVG) and export give the same busy share.
"""
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "viewer"))
import windows_check as wc  # noqa: E402
from lstest import Fail, check, eq, query, meta, integrity, tmpdir, parse_args, run_case  # noqa: E402

A = None
CASES = {}
PROCS = []
MS = 1_000_000
SERVER = os.path.join(HERE, "..", "..", "examples", "asyncio_server.py")


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def request(port, route):
    """One request, its whole answer read (the server keeps the connection:
    its Content-Length says where the answer ends)."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as c:
        c.sendall(f"GET {route} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        got = b""
        while b"\r\n\r\n" not in got:
            b = c.recv(4096)
            check(b, f"{route}: connection closed after {got!r}")
            got += b
        head, _, body = got.partition(b"\r\n\r\n")
        n = next((int(l.split(b":")[1]) for l in head.split(b"\r\n")
                  if l.lower().startswith(b"content-length:")), 0)
        while len(body) < n:
            b = c.recv(4096)
            check(b, f"{route}: connection closed")
            body += b
    check(got.startswith(b"HTTP/1.1 200"), f"answer to {route}: {got[:80]!r}")


def cleanup():
    for p in PROCS:
        if p.poll() is None:
            p.kill()
        p.wait()


@case
def asyncio_idle_tail():
    """The demo's asyncio server: busy, blocked, then idle until the end."""
    py = "/usr/bin/python3.11" if os.path.exists("/usr/bin/python3.11") else sys.executable
    srv = subprocess.Popen([py, SERVER, "--port", "0"], stdout=subprocess.PIPE, text=True)
    PROCS.append(srv)
    pid = int(srv.stdout.readline().split()[1])
    port = int(srv.stdout.readline().split()[1])
    db = os.path.join(tmpdir(), "asyncio.db")
    rec = subprocess.Popen([A.loopscope, "record", "-p", str(pid), "-o", db],
                           stderr=subprocess.PIPE, text=True)
    PROCS.append(rec)
    first = rec.stderr.readline()
    check(first.startswith(f"recording pid {pid} ") and "generic loop mode" in first,
          f"record's first line {first!r}")
    for _ in range(3):
        for r in ("/", "/report", "/checksum"):
            request(port, r)
    idle0 = time.monotonic_ns()
    time.sleep(1.5)                       # the loop asleep in epoll_wait, nothing to do
    rec.send_signal(2)
    _, err = rec.communicate(timeout=60)
    eq(rec.returncode, 0, f"record's exit status ({err.strip()})")
    integrity(db)
    check(srv.poll() is None, "the server died while traced")

    errs = wc.cover_errors(db, exempt_exits=False)     # a fresh recording: no exception
    check(not errs, "windows that do not add up:\n  " + "\n  ".join(errs))
    nwin, neps = query(db, "SELECT (SELECT count(*) FROM loop_windows),"
                           " (SELECT count(*) FROM blocking)")[0]
    check(nwin >= 3 and neps >= 3, f"{nwin} windows, {neps} blocking episodes: too few to judge")
    # the idle tail: the last window of the loop thread, completed at the stop
    s, e, it, wait, busy = query(db, "SELECT start_ns, end_ns, iterations, wait_ns, busy_ns"
                                     " FROM loop_windows WHERE loop_id = ?"
                                     " ORDER BY start_ns DESC LIMIT 1", pid)[0]
    check(e - max(s, idle0) >= 1400 * MS,
          f"last window [{s}, {e}) does not cover the 1.5 s idle tail from {idle0}")
    check(wait >= 0.99 * (e - s), f"idle last window: wait {wait} of {e - s} ns")
    rows, shares, out = wc.timeline_rows(A.loopscope, db, columns=221)
    row = rows.get(pid, "")
    tail = row.rstrip()[-30:]
    check(tail and set(tail) == {"."}, f"idle tail drawn {tail!r}, want waiting ('.'):\n{out}")
    errs = wc.agreement_errors(A.loopscope, db)
    check(not errs, "info, timeline and export disagree:\n  " + "\n  ".join(errs))
    m = meta(db)
    print(f"  note: {nwin} windows, {neps} episodes, last window {(e - s) / 1e9:.2f} s "
          f"({wait / (e - s):.4f} waiting), shares {shares.get(pid)}, "
          f"end_ns - last window end {(int(m['end_ns']) - e) / 1e6:.1f} ms")


def main():
    global A
    A = parse_args(CASES, ["loopscope"])
    return run_case(CASES, A, cleanup)


if __name__ == "__main__":
    raise SystemExit(main())
