#!/usr/bin/env python3
"""http_peers.py -- the end-to-end benchmark: keep-alive HTTP on libevl and its peers.

    tests/bench/http_peers.py [--build DIR] [--rounds N] [--seconds S]
                              [--connections C] [--threads T] [--servers LIST]
                              [--syscalls | --callgrind [--top K]]

The same keep-alive HTTP/1.1 serving of `GET /` (one short fixed body) by

    libevl    BUILD/examples/http_server (one task per connection)
    libuv     BUILD/tests/bench/http_uv (http_uv.c: the same logic on libuv)
    asyncio   tests/bench/asyncio_http_server.py (asyncio.start_server),
              made to answer the same bytes
    uvloop    the same on uvloop, when a python3 here can import it
              (Debian's python3-uvloop, for /usr/bin/python3)

each measured with `wrk -t T -c C -d S --latency` (default -t1 -c8 -d5s) in
N rounds (default 5); within a round the servers run one after the other
(a fresh process each), in the listed order in odd rounds and reversed in
even ones (ABBA), so a slow phase of the machine hurts all alike.
Before measuring it fetches `GET /` from every server with curl and stops
unless all answers are the same bytes (status line, headers, body).

Prints one line per run (requests/s, p99, the server's CPU time per
request: user + system of all its threads from /proc/PID/stat over the wrk
run, over wrk's request count; the machine's steal and 1-minute load
average), then per server the medians over the rounds and their ratios to
the libuv server's medians (requests/s: above 1 is better; p99 and CPU per
request: below 1 is better), then the paired ratios: each round's libevl
figure over that round's libuv figure, and their median.  The goals
(issues 13 and 36): libevl >= 1.0x libuv in requests/s and <= 1.0x in
server CPU per request.

--syscalls replaces the timed rounds with one run of each server under
`strace -f -c` and prints its syscalls per request, by syscall (a count:
the load of the machine hardly changes it, strace's slowdown does batch
more requests per poll).

--callgrind replaces the timed rounds with one run of each server under
valgrind's callgrind: instructions counted, not timed, so the same from run
to run whatever the machine's load.  The counters are zeroed once the
server listens (callgrind_control -z), wrk runs S seconds, the counters
are dumped; it prints the user-space instructions per request (libraries
included, the kernel not) and the K functions with the most (self cost per
request; --top, default 15).  Under callgrind the server is some 50x
slower, so each poll finds more requests ready than in a timed run: the
counts weigh the per-request path more than the per-poll one.

A benchmark, not a test: it prints numbers, it does not pass or fail on
them.  Exit status 77 when wrk or curl (or, for --callgrind, valgrind) is
missing, 1 when a server fails to start, answers differently, or wrk
reports errors.  Run it on an otherwise idle machine (2 CPUs: the server
and wrk each take one).
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

from http_overhead import cpu_seconds, wrk  # the same helpers, one copy (as generic_overhead.py)

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

    cpu = None                        # --pin: the server's CPU

    def __init__(self, name, cmd):
        self.name, self.cmd = name, cmd

    def __enter__(self):
        cpu = Server.cpu
        self.p = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True,
                                  preexec_fn=(lambda: os.sched_setaffinity(0, {cpu}))
                                  if cpu is not None else None)
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


def syscalls_perf_trace(name, cmd, seconds, connections, threads):
    """One run of the server with `perf trace -s -p PID` attached during
    wrk (root; lighter than strace): ({syscall: calls per request},
    {syscall: failed calls per request}, requests)."""
    import tempfile
    with tempfile.NamedTemporaryFile(prefix="http_peers-", suffix=".perf") as out:
        with Server(name, cmd) as s:
            tr = subprocess.Popen(["perf", "trace", "-s", "-p", str(s.pid), "-o", out.name],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)                 # attached
            p = subprocess.run(["wrk", "-t", str(threads), "-c", str(connections),
                                "-d", f"{seconds}s", s.url], capture_output=True, text=True,
                               timeout=seconds + 60)
            tr.send_signal(signal.SIGINT)
            tr.wait(timeout=60)
        total = re.search(r"^\s+(\d+) requests in", p.stdout, re.M)
        if p.returncode != 0 or not total:
            raise RuntimeError(f"wrk failed ({p.returncode}):\n{p.stdout}{p.stderr}")
        reqs = int(total.group(1))
        calls, errors = {}, {}
        for line in open(out.name):
            f = line.split()
            # "syscall calls errors total min avg max stddev"
            if len(f) >= 3 and f[1].isdigit() and f[2].isdigit():
                calls[f[0]] = int(f[1]) / reqs
                errors[f[0]] = int(f[2]) / reqs
    return calls, errors, reqs


def cpu_ns(pid):
    """CPU time (user + system) of every thread of pid so far, in ns: the
    scheduler's own accounting (/proc/PID/task/*/schedstat), finer than
    /proc/PID/stat's clock ticks; those when schedstat is missing."""
    total, found = 0, False
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tids = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
                found = True
        except (OSError, ValueError, IndexError):
            pass
    return total if found else int(cpu_seconds(pid) * 1e9)


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def callgrind_run(name, cmd, seconds, connections, threads, top, cache_sim=False):
    """One run of the server under callgrind, counters zeroed once it
    listens and dumped after wrk: (instructions per request, requests,
    [(self instructions per request, function)] of the top functions,
    {event: count per request} of the simulated cache with cache_sim)."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="http_peers-cg-") as d:
        outf = os.path.join(d, "cg.out")
        with Server(name, ["valgrind", "--tool=callgrind", f"--callgrind-out-file={outf}"]
                    + (["--cache-sim=yes"] if cache_sim else []) + cmd) as s:
            # The server printed its port from inside valgrind: it listens.
            subprocess.run(["callgrind_control", "-z", str(s.pid)], capture_output=True,
                           check=True, timeout=60)
            p = subprocess.run(["wrk", "-t", str(threads), "-c", str(connections),
                                "-d", f"{seconds}s", s.url], capture_output=True, text=True,
                               timeout=seconds + 120)
            subprocess.run(["callgrind_control", "-d", str(s.pid)], capture_output=True,
                           check=True, timeout=60)
        total = re.search(r"^\s+(\d+) requests in", p.stdout, re.M)
        if p.returncode != 0 or not total:
            raise RuntimeError(f"wrk failed ({p.returncode}):\n{p.stdout}{p.stderr}")
        reqs = int(total.group(1))
        dumps = sorted(f for f in os.listdir(d) if re.fullmatch(r"cg\.out\.\d+", f))
        if not dumps:
            raise RuntimeError(f"{name}: callgrind wrote no dump")
        dump = os.path.join(d, dumps[0])
        ir, events, counts = None, [], {}
        with open(dump) as f:
            for line in f:
                if line.startswith("events:"):
                    events = line.split()[1:]
                m = re.match(r"(?:summary|totals):\s+([\d ]+)", line)
                if m:
                    vals = [int(v) for v in m.group(1).split()]
                    ir = vals[0]
                    counts = {e: v / reqs for e, v in zip(events, vals)}
                    break
        ann = subprocess.run(["callgrind_annotate", "--threshold=100", dump],
                             capture_output=True, text=True).stdout
        funcs = []
        for line in ann.splitlines():
            m = re.match(r"\s*([\d,]+)\s+\([\s\d.]+%\)\s+(.*)$", line)
            if m and "PROGRAM TOTALS" not in line:
                fn = m.group(2)
                fn = re.sub(r"^.*?:(?=[^:/]+ \[)", "", fn)       # file: prefix off
                fn = re.sub(r" \[(.*/)?([^/\]]+)\]$", r" (\2)", fn)  # object's base name
                funcs.append((int(m.group(1).replace(",", "")) / reqs, fn))
    # Functions on the stack when the counters were zeroed (main and what
    # calls it) come out with the whole count as their own: not listed.
    funcs = [(n, fn) for n, fn in funcs if n < 0.99 * ir / reqs]
    return ir / reqs, reqs, funcs[:top], counts


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
    ap.add_argument("--tracer", choices=("strace", "perf"), default="strace",
                    help="--syscalls: strace -f -c over the whole run (default), or perf "
                         "trace -s attached for the wrk run (root; lighter, and it counts "
                         "the failed calls: a read that met EAGAIN)")
    ap.add_argument("--callgrind", action="store_true",
                    help="instead of timing: one run of each server under callgrind, "
                         "instructions per request (a count, not affected by the load)")
    ap.add_argument("--pin", metavar="S,C",
                    help="run each server on CPU S and wrk (and this script) on CPU C")
    ap.add_argument("--cache-sim", action="store_true",
                    help="--callgrind: also callgrind's cache model (first-level and last-level "
                         "misses per request, D1mr/D1mw reads/writes)")
    ap.add_argument("--top", type=int, default=15,
                    help="--callgrind: how many functions to list per server")
    a = ap.parse_args()
    for tool in ("wrk", "curl") + (("valgrind", "callgrind_control", "callgrind_annotate")
                                   if a.callgrind else ()):
        if not shutil.which(tool):
            print(f"http_peers.py: needs {tool}", file=sys.stderr)
            return 77
    servers = server_cmds(os.path.abspath(a.build), a.servers.split(","))
    if a.pin:
        scpu, ccpu = (int(x) for x in a.pin.split(","))
        Server.cpu = scpu
        os.sched_setaffinity(0, {ccpu})   # wrk inherits it

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

    if a.syscalls and a.tracer == "perf":
        if not shutil.which("perf"):
            print("http_peers.py: --tracer perf needs perf", file=sys.stderr)
            return 77
        print(f"syscalls per request under perf trace -s (wrk -t{a.threads} -c{a.connections} "
              f"-d{a.seconds}s; tracing slows the server a little, so polls are amortised "
              f"over somewhat more requests than in a timed run)")
        for name, cmd in servers.items():
            calls, errors, reqs = syscalls_perf_trace(name, cmd, a.seconds, a.connections,
                                                      a.threads)
            top = sorted(((v, k) for k, v in calls.items() if v >= 0.01), reverse=True)
            detail = ", ".join(f"{k} {v:.2f}" + (f" ({errors[k]:.2f} failed)"
                                                 if errors[k] >= 0.01 else "")
                               for v, k in top)
            print(f"{name:8} {sum(calls.values()):6.2f} per request ({reqs} requests): {detail}")
        return 0

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

    if a.callgrind:
        print(f"user-space instructions per request under callgrind (wrk -t{a.threads} "
              f"-c{a.connections} -d{a.seconds}s; counters zeroed once the server listens)")
        per = {}
        for name, cmd in servers.items():
            ir, reqs, funcs, counts = callgrind_run(name, cmd, a.seconds, a.connections,
                                                    a.threads, a.top, a.cache_sim)
            per[name] = ir
            print(f"\n{name}: {ir:,.0f} instructions per request ({reqs} requests)")
            if a.cache_sim:
                print("  simulated cache misses per request: " +
                      ", ".join(f"{e} {counts[e]:.2f}" for e in
                                ("I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw") if e in counts))
            print(f"  top {len(funcs)} by self cost:")
            for n, fn in funcs:
                print(f"  {n:9,.1f}  {fn}")
        if "libuv" in per:
            print()
            for name, ir in per.items():
                print(f"{name:8} {ir:9,.0f} instructions/request  {ir / per['libuv']:.3f}x libuv")
        return 0

    res = {name: [] for name in servers}
    names = list(servers)
    print(f"wrk -t{a.threads} -c{a.connections} -d{a.seconds}s, {a.rounds} rounds "
          f"(order {', '.join(names)}, reversed in even rounds)"
          + (f"; servers on CPU {Server.cpu}, wrk on CPU {sorted(os.sched_getaffinity(0))[0]}"
             if Server.cpu is not None else ""))
    for r in range(a.rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            with Server(name, servers[name]) as s:
                load = loadavg()
                c0 = cpu_ns(s.pid)
                rps, p99, reqs, steal = wrk(s.url, a.seconds, a.connections, a.threads)
                cpu = (cpu_ns(s.pid) - c0) / max(reqs, 1) / 1e3
            res[name].append((rps, p99, cpu))
            print(f"round {r + 1} {name:8} {rps:10.0f} req/s  p99 {p99 * 1e3:8.3f} ms  "
                  f"cpu {cpu:6.2f} us/req  steal {steal * 100:4.1f} %  load {load:5.2f}",
                  flush=True)

    med = {n: tuple(statistics.median(x[k] for x in v) for k in range(3))
           for n, v in res.items()}
    base = med.get("libuv")
    print()
    print(f"{'server':8} | {'req/s (median)':>14} | {'p99 ms (median)':>15} | "
          f"{'cpu us/req (median)':>19} | {'req/s / libuv':>13} | {'p99 / libuv':>11} | "
          f"{'cpu / libuv':>11}")
    print("-" * 9 + "+" + "-" * 16 + "+" + "-" * 17 + "+" + "-" * 21 + "+" + "-" * 15 + "+"
          + "-" * 13 + "+" + "-" * 12)
    for name, (rps, p99, cpu) in med.items():
        rr = f"{rps / base[0]:.3f}x" if base else "-"
        pr = f"{p99 / base[1]:.3f}x" if base and base[1] > 0 else "-"
        cr = f"{cpu / base[2]:.3f}x" if base and base[2] > 0 else "-"
        print(f"{name:8} | {rps:14.0f} | {p99 * 1e3:15.3f} | {cpu:19.2f} | {rr:>13} | "
              f"{pr:>11} | {cr:>11}")
    if base and "libevl" in med:
        pr = [e[0] / u[0] for e, u in zip(res["libevl"], res["libuv"])]
        pc = [e[2] / u[2] for e, u in zip(res["libevl"], res["libuv"]) if u[2] > 0]
        print("\npaired, libevl / libuv in each round:")
        print("  req/s:       " + " ".join(f"{x:.3f}" for x in pr) +
              f"   median {statistics.median(pr):.3f}x")
        if pc:
            print("  cpu/request: " + " ".join(f"{x:.3f}" for x in pc) +
                  f"   median {statistics.median(pc):.3f}x")
        ok_r = statistics.median(pr) >= 1.0
        ok_c = bool(pc) and statistics.median(pc) <= 1.0
        print(f"\ngoals (issues 13, 36), by the paired medians: libevl >= 1.0x libuv in "
              f"req/s: {'met' if ok_r else 'NOT met'}; <= 1.0x libuv in server CPU per "
              f"request: {'met' if ok_c else 'NOT met'} (in this run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
