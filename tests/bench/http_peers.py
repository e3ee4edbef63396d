#!/usr/bin/env python3
"""http_peers.py -- the end-to-end benchmark: keep-alive HTTP on libevl and its peers.

    tests/bench/http_peers.py [--build DIR] [--rounds N] [--seconds S]
                              [--connections C] [--threads T] [--servers LIST]
                              [--syscalls]

The same keep-alive HTTP/1.1 serving of `GET /` (one short fixed body) by

    libevl    BUILD/examples/http_server (one task per connection)
    libuv     BUILD/tests/bench/http_uv (http_uv.c: the same logic on libuv)
    asyncio   tests/bench/asyncio_http_server.py (asyncio.start_server),
              made to answer the same bytes
    uvloop    the same on uvloop, when a python3 here can import it
              (Debian's python3-uvloop, for /usr/bin/python3)

each measured with `wrk -t T -c C -d S --latency` (default -t1 -c8 -d5s) in
N rounds (default 5); within a round the servers run one after the other
(a fresh process each), so a slow phase of the machine hurts all alike.
Before measuring it fetches `GET /` from every server with curl and stops
unless all answers are the same bytes (status line, headers, body).

Prints one line per run, then per server the median requests/s and p99
latency over the rounds and their ratios to the libuv server's medians
(requests/s: above 1 is better; p99: below 1 is better).  The goal of
issue 13 is libevl >= 1.0x libuv in requests/s.

--syscalls replaces the timed rounds with one run of each server under
`strace -f -c` and prints its syscalls per request, by syscall (a count:
the load of the machine hardly changes it, strace's slowdown does batch
more requests per poll).

A benchmark, not a test: it prints numbers, it does not pass or fail on
them.  Exit status 77 when wrk or curl is missing, 1 when a server fails to
start, answers differently, or wrk reports errors.  Run it on an otherwise
idle machine (2 CPUs: the server and wrk each take one).
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

from http_overhead import wrk  # the same helper, one copy (as generic_overhead.py)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# asyncio_http_server.py answers its own fixed response; the launcher loads
# it as a module and gives it examples/http_server's bytes for GET / (its
# handler reads the module's RESPONSE at each request), optionally on
# uvloop.  argv: script path, "asyncio" or "uvloop".
LAUNCHER = r"""
import asyncio, importlib.util, sys
spec = importlib.util.spec_from_file_location("asyncio_http_server", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
BODY = b"hello from libevl\n"
mod.RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                b"Content-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)
if sys.argv[2] == "uvloop":
    import uvloop
    uvloop.install()
asyncio.run(mod.main(0))
"""


def uvloop_python():
    """A python3 that can import uvloop, or None."""
    seen = set()
    for py in (sys.executable, "/usr/bin/python3"):
        if not py or py in seen or not os.path.exists(py):
            continue
        seen.add(py)
        if subprocess.run([py, "-c", "import uvloop"], capture_output=True).returncode == 0:
            return py
    return None


def server_cmds(build, which):
    script = os.path.join(HERE, "asyncio_http_server.py")
    cmds = {
        "libevl": [os.path.join(build, "examples", "http_server"), "--port", "0"],
        "libuv": [os.path.join(build, "tests", "bench", "http_uv"), "--port", "0"],
        "asyncio": [sys.executable, "-c", LAUNCHER, script, "asyncio"],
    }
    py = uvloop_python()
    if py:
        cmds["uvloop"] = [py, "-c", LAUNCHER, script, "uvloop"]
    out = {}
    for name in which:
        if name not in cmds:
            if name == "uvloop":
                print("uvloop: not importable by any python3 here (apt-get install "
                      "python3-uvloop); skipped", file=sys.stderr)
                continue
            sys.exit(f"http_peers.py: unknown server '{name}'")
        if not os.path.exists(cmds[name][0]):
            sys.exit(f"http_peers.py: {cmds[name][0]} is not built "
                     f"(cmake --build {build} --target http_server http_uv)")
        out[name] = cmds[name]
    return out


class Server:
    """A server process on a free port: it prints 'pid P' (the server's own
    pid, which is not the Popen's under strace) and 'port N' when it listens;
    stopped with SIGTERM to P."""

    def __init__(self, name, cmd):
        self.name, self.cmd = name, cmd

    def __enter__(self):
        self.p = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True)
        deadline = time.monotonic() + 10
        self.port = None
        self.pid = self.p.pid
        while time.monotonic() < deadline:
            line = self.p.stdout.readline()
            if not line:
                break
            m = re.match(r"(pid|port) (\d+)", line)
            if m and m.group(1) == "pid":
                self.pid = int(m.group(2))
            elif m:
                self.port = int(m.group(2))
                break
        if not self.port:
            self.stop()
            raise RuntimeError(f"{self.name}: did not print its port ({self.cmd})")
        return self

    def stop(self):
        if self.p.poll() is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.p.stdout.close()

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/"


def fetch(url):
    """GET url with curl: the whole response (status line, headers, body)."""
    p = subprocess.run(["curl", "-s", "-i", "--max-time", "10", url], capture_output=True)
    if p.returncode != 0:
        raise RuntimeError(f"curl {url} failed ({p.returncode})")
    return p.stdout


def syscalls_per_request(name, cmd, seconds, connections, threads):
    """One run of the server under strace -f -c: {syscall: calls per request}."""
    import tempfile
    with tempfile.NamedTemporaryFile(prefix="http_peers-", suffix=".strace") as out:
        with Server(name, ["strace", "-f", "-c", "-o", out.name] + cmd) as s:
            p = subprocess.run(["wrk", "-t", str(threads), "-c", str(connections),
                                "-d", f"{seconds}s", s.url], capture_output=True, text=True,
                               timeout=seconds + 60)
        total = re.search(r"^\s+(\d+) requests in", p.stdout, re.M)
        if p.returncode != 0 or not total:
            raise RuntimeError(f"wrk failed ({p.returncode}):\n{p.stdout}{p.stderr}")
        reqs = int(total.group(1))
        counts = {}
        for line in open(out.name):
            f = line.split()
            # "% time, seconds, usecs/call, calls, [errors,] syscall"
            if len(f) >= 5 and f[0][0].isdigit() and f[3].isdigit():
                counts[f[-1]] = int(f[3])
    return {k: v / reqs for k, v in counts.items()}, reqs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--servers", default="libevl,libuv,asyncio,uvloop",
                    help="comma-separated subset, measured in this order")
    ap.add_argument("--syscalls", action="store_true",
                    help="instead of timing: one run of each server under strace -f -c, "
                         "syscalls per request (a count, hardly affected by the load)")
    a = ap.parse_args()
    for tool in ("wrk", "curl"):
        if not shutil.which(tool):
            print(f"http_peers.py: needs {tool}", file=sys.stderr)
            return 77
    servers = server_cmds(os.path.abspath(a.build), a.servers.split(","))

    # Same bytes from everyone, or the comparison means nothing.
    answers = {}
    for name, cmd in servers.items():
        with Server(name, cmd) as s:
            answers[name] = fetch(s.url)
    ref_name = "libuv" if "libuv" in answers else next(iter(answers))
    for name, body in answers.items():
        if body != answers[ref_name]:
            print(f"http_peers.py: {name} answers {body!r}, {ref_name} {answers[ref_name]!r}",
                  file=sys.stderr)
            return 1
    print(f"GET / answered identically by {', '.join(answers)} ({len(answers[ref_name])} bytes)")

    if a.syscalls:
        if not shutil.which("strace"):
            print("http_peers.py: --syscalls needs strace", file=sys.stderr)
            return 77
        print(f"syscalls per request under strace (wrk -t{a.threads} -c{a.connections} "
              f"-d{a.seconds}s; strace slows the server, so polls are amortised over "
              f"more requests than in a timed run)")
        for name, cmd in servers.items():
            per, reqs = syscalls_per_request(name, cmd, a.seconds, a.connections, a.threads)
            top = sorted(((v, k) for k, v in per.items() if v >= 0.01 and k != "total"),
                         reverse=True)
            detail = ", ".join(f"{k} {v:.2f}" for v, k in top)
            print(f"{name:8} {per.get('total', sum(per.values())):6.2f} per request "
                  f"({reqs} requests): {detail}")
        return 0

    res = {name: [] for name in servers}
    print(f"wrk -t{a.threads} -c{a.connections} -d{a.seconds}s, {a.rounds} rounds")
    for r in range(a.rounds):
        for name, cmd in servers.items():
            with Server(name, cmd) as s:
                rps, p99, _, _ = wrk(s.url, a.seconds, a.connections, a.threads)
            res[name].append((rps, p99))
            print(f"round {r + 1} {name:8} {rps:10.0f} req/s  p99 {p99 * 1e3:8.3f} ms", flush=True)

    med = {n: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
           for n, v in res.items()}
    base = med.get("libuv")
    print()
    print(f"{'server':8} | {'req/s (median)':>14} | {'p99 ms (median)':>15} | "
          f"{'req/s / libuv':>13} | {'p99 / libuv':>11}")
    print("-" * 9 + "+" + "-" * 16 + "+" + "-" * 17 + "+" + "-" * 15 + "+" + "-" * 12)
    for name, (rps, p99) in med.items():
        rr = f"{rps / base[0]:.3f}x" if base else "-"
        pr = f"{p99 / base[1]:.3f}x" if base and base[1] > 0 else "-"
        print(f"{name:8} | {rps:14.0f} | {p99 * 1e3:15.3f} | {rr:>13} | {pr:>11}")
    if base and "libevl" in med:
        ok = med["libevl"][0] / base[0] >= 1.0
        print(f"\ngoal (issue 13): libevl >= 1.0x libuv in req/s: "
              f"{'met' if ok else 'NOT met'} in this run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
