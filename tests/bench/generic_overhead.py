#!/usr/bin/env python3
"""generic_overhead.py -- what loopscope's generic loop mode costs: per loop iteration, to bystanders, and to real servers.

    tests/bench/generic_overhead.py [--build DIR] [--rounds N] [--seconds S]
                                    [--iters N] [--reps K] [--parts LIST] [--quick]
                                    [--wait-hook tracepoint|raw]

Needs root (BPF), wrk, redis-server and redis-benchmark (exit status 77
otherwise).  "recorded" below means `loopscope record -p PID --mode generic
-o TMP.db` attached to the process (the run starts once the recorder has
printed "recording pid ... in the generic loop mode", i.e. every program
is attached) and stopped with SIGINT after the run.  Three parts (--parts
micro,http,redis selects some):

micro -- epoll_spin (tests/bench/epoll_spin.c): a loop whose every
    iteration is one epoll_wait(timeout 0) that returns at once, the
    cheapest iteration there is.  Three long-lived processes pinned to one
    CPU ($BENCH_CPU, default the last; empty: no pinning), measured one
    after the other, each measurement N iterations timed with the thread's
    CPU clock:
      target     the process that is recorded in the recorded modes
      bystander  another epoll_spin that is never recorded: what the
                 tracepoint programs cost other processes' epoll_wait calls
      getppid    epoll_spin --mode getppid, never recorded: what enabling
                 syscall tracepoints costs unrelated syscalls
    Each round runs the modes in this order, so that each recorded mode has
    an untraced neighbour:
      untraced, generic, generic --wait-hook raw, generic --wait-calls all,
      untraced, generic --no-blocking, bpftrace reference
    "bpftrace reference" (when bpftrace is installed) attaches bpftrace
    with a count() on the same two tracepoints (sys_enter/exit_epoll_wait,
    filtered to the target's pid): the kernel's own price for a BPF program
    on these tracepoints, so that the table separates it from what
    loopscope's programs add.  +ns/iter = mode - untraced (min - min and
    median - median) for the same process.

http -- tests/bench/asyncio_http_server.py (stdlib asyncio.start_server,
    fixed keep-alive response) under `wrk -t1 -c8 -d S --latency`, rounds of
    untraced, recorded, untraced, recorded.  Per mode the medians of req/s
    and p99 and their ratios to untraced; the server's CPU time per request
    (utime + stime, /proc/PID/stat); the loop iterations per second from the
    trace (loop_windows that lie within the wrk run) and per request; and
    the added CPU time per iteration:
      (cpu_per_req_recorded - cpu_per_req_untraced) / iterations_per_req

redis -- Debian's redis-server on a free port (--save "" --appendonly no)
    under `redis-benchmark -t get,set -n N -c 8 -P 1 --csv` (N chosen in a
    warm-up so that one run takes about S seconds), rounds of untraced,
    recorded, untraced, recorded; the same figures per test (SET, GET) and
    for the whole run.

A benchmark, not a test: it prints numbers, it never passes or fails on
speed.  It fails (exit status 1) when something misbehaves: a process or a
recorder exits with an error, a trace is not in the generic mode or counts
no loop iterations.  --quick runs tiny sizes (the ctest smoke entry
bench.generic_smoke): its numbers are meaningless.  Temporary traces go to
a directory that is removed on exit, even on failure.
"""
import argparse
import csv
import io
import os
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tracer_bench import dropped, exit_on_sigterm  # noqa: E402  (one copy of each helper)
from http_overhead import cpu_seconds, free_port, wrk  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ATTACHED = re.compile(r"recording pid \d+ .* in the generic loop mode into")


def median(v):
    return statistics.median(v) if v else float("nan")


class Background:
    """A child whose output (both streams, lines split at \\n and \\r) is
    collected by a thread, so that it never blocks on a full pipe; wait_for()
    waits for a line matching a pattern."""

    def __init__(self, cmd, what):
        self.cmd, self.what = cmd, what
        self.lines = []
        self.cond = threading.Condition()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self):
        buf = b""
        while True:
            chunk = self.proc.stdout.read1(65536)
            if not chunk:
                break
            buf += chunk
            *done, buf = re.split(rb"[\r\n]", buf)
            with self.cond:
                self.lines += [l.decode(errors="replace") for l in done if l.strip()]
                self.cond.notify_all()
        with self.cond:
            if buf.strip():
                self.lines.append(buf.decode(errors="replace"))
            self.cond.notify_all()

    def output(self):
        with self.cond:
            return "\n".join(self.lines)

    def wait_for(self, pattern, timeout=60):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                if any(pattern.search(l) for l in self.lines):
                    return
                if self.proc.poll() is not None and not self.thread.is_alive():
                    raise RuntimeError(f"{self.what} exited ({self.proc.returncode}) before "
                                       f"attaching:\n{chr(10).join(self.lines)}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"{self.what} did not attach in {timeout} s:\n"
                                       f"{chr(10).join(self.lines)}")
                self.cond.wait(min(left, 0.1))

    def stop(self, check):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.thread.join(timeout=10)
        self.proc.stdout.close()
        if check and self.proc.returncode != 0:
            raise RuntimeError(f"{self.what} exited {self.proc.returncode}:\n{self.output()}")


class Recorder:
    """`loopscope record -p PID --mode generic [extra]` for a with-block."""

    def __init__(self, loopscope, pid, db, extra):
        self.cmd = [loopscope, "record", "-p", str(pid), "-o", db, "--mode", "generic", *extra]
        self.db, self.bg = db, None

    def __enter__(self):
        self.bg = Background(self.cmd, " ".join(self.cmd))
        try:
            self.bg.wait_for(ATTACHED, timeout=60)
        except BaseException:
            self.bg.stop(check=False)
            raise
        return self

    def __exit__(self, *exc):
        self.bg.stop(check=exc[0] is None)
        return False

    def trace(self, t0=None, t1=None):
        """(meta, iterations in all windows, iterations/s over the windows
        that lie within [t0, t1] (CLOCK_MONOTONIC ns), or None)."""
        con = sqlite3.connect(self.db)
        try:
            meta = dict(con.execute("SELECT key, value FROM meta"))
            total = con.execute("SELECT coalesce(sum(iterations), 0) FROM loop_windows"
                                ).fetchone()[0]
            rate = None
            if t0 is not None:
                n, ns = con.execute(
                    "SELECT coalesce(sum(iterations), 0), coalesce(sum(end_ns - start_ns), 0) "
                    "FROM loop_windows WHERE start_ns >= ? AND end_ns <= ?", (t0, t1)).fetchone()
                rate = n / (ns / 1e9) if ns else None
        finally:
            con.close()
        if meta.get("mode") != "generic":
            raise RuntimeError(f"{self.db}: meta mode is {meta.get('mode')!r}, not 'generic'")
        if total <= 0:
            raise RuntimeError(f"{self.db}: the trace counts no loop iterations")
        return meta, total, rate


class Bpftrace:
    """The reference: bpftrace counting the same two tracepoints for PID."""

    def __init__(self, bpftrace, pid):
        prog = ('BEGIN { printf("attached\\n"); } '
                f"tracepoint:syscalls:sys_enter_epoll_wait /pid == {pid}/ {{ @enter = count(); }} "
                f"tracepoint:syscalls:sys_exit_epoll_wait /pid == {pid}/ {{ @exit = count(); }}")
        self.cmd = [bpftrace, "-e", prog]
        self.bg = None

    def __enter__(self):
        self.bg = Background(self.cmd, "bpftrace")
        try:
            self.bg.wait_for(re.compile(r"^attached$"), timeout=60)
        except BaseException:
            self.bg.stop(check=False)
            raise
        return self

    def __exit__(self, *exc):
        self.bg.stop(check=exc[0] is None)
        return False


class Spinner:
    """A served epoll_spin: measure(n) -> CPU ns per iteration."""

    def __init__(self, binary, mode, cpu):
        self.proc = subprocess.Popen([binary, "--mode", mode], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        m = re.match(r"pid (\d+)$", self.proc.stdout.readline().strip())
        if not m or self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{binary} did not start")
        self.pid = int(m.group(1))
        if cpu is not None:
            os.sched_setaffinity(self.pid, {cpu})

    def measure(self, n):
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        m = re.match(r"ns_per_iter ([0-9.]+) ", line)
        if not m:
            raise RuntimeError(f"epoll_spin answered {line!r} (exit {self.proc.poll()})")
        return float(m.group(1))

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def foreign_tracers(own=()):
    """Pids of other loopscope / bpftrace processes on the machine (not in
    own): their programs on the same tracepoints would also slow the
    "untraced" runs, so rows measured while one ran are marked."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in own or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/comm") as f:
                if f.read().strip() in ("loopscope", "bpftrace"):
                    pids.append(int(d))
        except OSError:
            pass
    return pids


def load():
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


# ----------------------------------------------------------------------- micro

def part_micro(a, tools, tmp):
    spin = os.path.join(a.build, "tests", "bench", "epoll_spin")
    if not os.access(spin, os.X_OK):
        raise RuntimeError(f"{spin} is not built")
    cpu = a.cpu
    procs = {}
    try:
        procs["target"] = Spinner(spin, "epoll", cpu)
        procs["bystander"] = Spinner(spin, "epoll", cpu)
        procs["getppid"] = Spinner(spin, "getppid", cpu)
        target = procs["target"]
        modes = [("untraced", None), ("generic", []),
                 ("generic --wait-hook raw", ["--wait-hook", "raw"]),
                 ("generic --wait-calls all", ["--wait-calls", "all"]),
                 ("untraced", None), ("generic --no-blocking", ["--no-blocking"])]
        if tools["bpftrace"] and not a.quick:
            modes.append(("bpftrace reference", "bpftrace"))
        names = list(dict.fromkeys(name for name, _ in modes))
        marked = 0
        res = {name: {p: [] for p in procs} for name in names}
        iters = {name: [] for name in names}
        for p in procs.values():          # warm up (page faults, caches)
            p.measure(max(a.iters // 10, 1000))
        print(f"micro: epoll_spin, {a.iters} iterations per measurement, {a.rounds} rounds x "
              f"{a.reps} measurements per process and mode; "
              f"{'pinned to CPU ' + str(cpu) if cpu is not None else 'not pinned'}; {load()}")
        print("CPU ns per iteration (the thread's CPU time) of: target (recorded in the recorded")
        print("modes), bystander (an epoll_spin never recorded), getppid (a getppid loop never "
              "recorded)")
        print(f"{'round':>5} {'mode':26} {'target':>8} {'bystander':>9} {'getppid':>8} "
              f"{'trace iter':>10} {'expected':>8}")
        for r in range(a.rounds):
            for name, how in modes:
                foreign = set(foreign_tracers())

                def run(own=()):
                    target.measure(max(a.iters // 5, 1000))   # after the attach: warm up
                    out = {p: [] for p in procs}
                    for _ in range(a.reps):
                        for p, sp in procs.items():
                            out[p].append(sp.measure(a.iters))
                        foreign.update(foreign_tracers(own))
                    return out
                traced_iters = expected = None
                if how is None:
                    out = run()
                elif how == "bpftrace":
                    with Bpftrace(tools["bpftrace"], target.pid) as bt:
                        out = run({bt.bg.proc.pid})
                else:
                    db = os.path.join(tmp, f"micro-{r}-{len(how)}.db")
                    rec = Recorder(tools["loopscope"], target.pid, db, how)
                    with rec:
                        out = run({rec.bg.proc.pid})
                    meta, traced_iters, _ = rec.trace()
                    if dropped(meta):
                        print(f"      note: {dropped(meta)} messages dropped")
                    os.unlink(db)
                    expected = max(a.iters // 5, 1000) + a.reps * a.iters
                    iters[name].append(traced_iters / expected)
                for p in procs:
                    res[name][p] += out[p]
                foreign.update(foreign_tracers())
                marked += bool(foreign)
                print(f"{r + 1:5d} {name:26} {median(out['target']):8.1f} "
                      f"{median(out['bystander']):9.1f} {median(out['getppid']):8.1f}"
                      + ("" if traced_iters is None else f" {traced_iters:10d} {expected:8d}")
                      + (f"  * other tracers ran: {sorted(foreign)}" if foreign else ""),
                      flush=True)
    finally:
        for p in procs.values():
            p.close()

    base = res["untraced"]
    print()
    print(f"micro summary ({load()}): CPU ns per iteration, min / median over {a.rounds} x "
          f"{a.reps} measurements; {marked} of {a.rounds * len(modes)} rows measured while "
          "another loopscope or bpftrace ran (*);")
    print("+ = mode - untraced for the same process (min - min / median - median)")
    print(f"{'mode':26} | {'target min':>10} {'median':>7} {'+min':>6} {'+median':>7} | "
          f"{'bystander':>9} {'+median':>7} | {'getppid':>7} {'+median':>7}")
    for name in names:
        t, b, g = res[name]["target"], res[name]["bystander"], res[name]["getppid"]
        if name == "untraced":
            print(f"{name:26} | {min(t):10.1f} {median(t):7.1f} {'':>6} {'':>7} | "
                  f"{median(b):9.1f} {'':>7} | {median(g):7.1f}")
            continue
        print(f"{name:26} | {min(t):10.1f} {median(t):7.1f} "
              f"{min(t) - min(base['target']):+6.1f} {median(t) - median(base['target']):+7.1f} | "
              f"{median(b):9.1f} {median(b) - median(base['bystander']):+7.1f} | "
              f"{median(g):7.1f} {median(g) - median(base['getppid']):+7.1f}")
    counted = [f"{name}: {min(v):.3f}-{max(v):.3f}" for name, v in iters.items() if v]
    print("iterations in the trace / epoll_wait(timeout 0) calls the target made while "
          "recorded (1 + the few idle waits between measurements): " + "; ".join(counted))
    return res


# ------------------------------------------------------------------------ http

def part_http(a, tools, tmp):
    server = subprocess.Popen([sys.executable, os.path.join(HERE, "asyncio_http_server.py")],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    runs = {"untraced": [], "recorded": []}
    marked = 0
    try:
        m = re.match(r"pid (\d+)$", server.stdout.readline().strip())
        p = re.match(r"port (\d+)$", server.stdout.readline().strip())
        if not (m and p):
            raise RuntimeError("asyncio_http_server.py did not start")
        pid = int(m.group(1))
        url = f"http://127.0.0.1:{p.group(1)}/"
        wrk(url, 1, 8, 1)                                   # warm up
        print(f"http: asyncio_http_server.py (python {sys.version.split()[0]}) under "
              f"wrk -t1 -c8 -d{a.seconds}s, {a.rounds} rounds; {load()}")
        print(f"{'round':>5} {'mode':10} {'req/s':>9} {'p99 ms':>7} {'cpu us':>7} "
              f"{'iter/s':>9} {'iter/req':>8} {'blocking':>8} {'dropped':>7}")
        print("(cpu us: the server's CPU time per request; iter/s: loop iterations per second "
              "in the trace)")
        for r in range(a.rounds):
            for name in ("untraced", "recorded", "untraced", "recorded"):
                foreign = set(foreign_tracers())
                if name == "untraced":
                    c0 = cpu_seconds(pid)
                    rps, p99, total, _ = wrk(url, a.seconds, 8, 1)
                    cpu = (cpu_seconds(pid) - c0) / total
                    foreign.update(foreign_tracers())
                    marked += bool(foreign)
                    runs[name].append((rps, p99, cpu, None))
                    print(f"{r + 1:5d} {name:10} {rps:9.0f} {p99 * 1e3:7.2f} {cpu * 1e6:7.2f}"
                          + (f"  * other tracers ran: {sorted(foreign)}" if foreign else ""),
                          flush=True)
                    continue
                db = os.path.join(tmp, f"http-{r}-{len(runs[name])}.db")
                rec = Recorder(tools["loopscope"], pid, db, ["--wait-hook", a.wait_hook])
                with rec:
                    c0, t0 = cpu_seconds(pid), time.monotonic_ns()
                    rps, p99, total, _ = wrk(url, a.seconds, 8, 1)
                    t1, cpu = time.monotonic_ns(), (cpu_seconds(pid) - c0) / total
                    foreign.update(foreign_tracers({rec.bg.proc.pid}))
                marked += bool(foreign)
                meta, _, ips = rec.trace(t0, t1)
                os.unlink(db)
                if ips is None:
                    raise RuntimeError("no loop window lies within the wrk run")
                runs[name].append((rps, p99, cpu, ips))
                print(f"{r + 1:5d} {name:10} {rps:9.0f} {p99 * 1e3:7.2f} {cpu * 1e6:7.2f} "
                      f"{ips:9.0f} {ips / rps:8.2f} {meta.get('blocking_episodes', '?'):>8} "
                      f"{dropped(meta):7d}"
                      + (f"  * other tracers ran: {sorted(foreign)}" if foreign else ""),
                      flush=True)
            if server.poll() is not None:
                raise RuntimeError(f"asyncio_http_server.py exited ({server.returncode})")
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    return summarize_server("http", runs, "req/s", marked=marked)


def summarize_server(part, runs, unit, note="", marked=0):
    """Medians of (rate, p99, cpu per request, iterations/s) runs; prints
    the summary and returns it."""
    b, rr = runs["untraced"], runs["recorded"]
    brate, bp99, bcpu = (median([x[i] for x in b]) for i in range(3))
    rate, p99, cpu, ips = (median([x[i] for x in rr]) for i in range(4))
    ipr = ips / rate
    ns_iter = (cpu - bcpu) / ipr * 1e9
    print()
    print(f"{part} summary ({load()}): medians over {len(b)} untraced and {len(rr)} recorded "
          f"runs ({marked} measured while another loopscope or bpftrace ran, *); "
          f"ratio = recorded / untraced{note}")
    print(f"{'mode':10} {unit:>9} {'ratio':>6} {'p99 ms':>7} {'ratio':>6} {'cpu us/req':>10} "
          f"{'iter/s':>9} {'iter/req':>8} {'+cpu ns/iter':>12}")
    print(f"{'untraced':10} {brate:9.0f} {1:6.3f} {bp99 * 1e3:7.3f} {1:6.3f} {bcpu * 1e6:10.2f}")
    print(f"{'recorded':10} {rate:9.0f} {rate / brate:6.3f} {p99 * 1e3:7.3f} {p99 / bp99:6.3f} "
          f"{cpu * 1e6:10.2f} {ips:9.0f} {ipr:8.2f} {ns_iter:12.0f}")
    return {"ratio": rate / brate, "p99_ratio": p99 / bp99, "ns_iter": ns_iter, "ips": ips,
            "rate": brate}


# ----------------------------------------------------------------------- redis

def redis_bench(port, n):
    """One redis-benchmark run: ({test: (rps, p99 s)}, requests, seconds)."""
    cmd = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", "get,set", "-n",
           str(n), "-c", "8", "-P", "1", "--csv"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    secs = time.monotonic() - t0
    rows = [r for r in csv.reader(io.StringIO(p.stdout)) if r and r[0] != "test"]
    tests = {r[0]: (float(r[1]), float(r[6]) * 1e-3) for r in rows}
    if p.returncode != 0 or set(tests) != {"SET", "GET"}:
        raise RuntimeError(f"redis-benchmark failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return tests, 2 * n, secs


def part_redis(a, tools, tmp):
    port = free_port()
    rdir = os.path.join(tmp, "redis")
    os.mkdir(rdir)
    server = subprocess.Popen([tools["redis-server"], "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no", "--dir", rdir,
                               "--logfile", os.path.join(rdir, "log"), "--daemonize", "no"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    runs = {"untraced": [], "recorded": []}
    per_test = {"untraced": {"SET": [], "GET": []}, "recorded": {"SET": [], "GET": []}}
    marked = 0
    try:
        pid = server.pid
        deadline = time.monotonic() + 20
        while subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "ping"],
                             capture_output=True, text=True).stdout.strip() != "PONG":
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start (see {rdir}/log)")
            time.sleep(0.1)
        tests, reqs, secs = redis_bench(port, 2000 if a.quick else 20000)   # warm up
        n = max(1000, int(reqs / secs * a.seconds / 2))
        print(f"redis: redis-server {redis_version(tools['redis-server'])} under redis-benchmark "
              f"-t get,set -n {n} -c 8 -P 1 (about {a.seconds} s per run), {a.rounds} rounds; "
              f"{load()}")
        print(f"{'round':>5} {'mode':10} {'SET/s':>8} {'p99 ms':>6} {'GET/s':>8} {'p99 ms':>6} "
              f"{'req/s':>8} {'cpu us':>6} {'iter/s':>8} {'iter/req':>8} {'blocking':>8} "
              f"{'dropped':>7}")
        print("(req/s: both tests' requests / wall time of the run; cpu us: the server's CPU "
              "time per request)")
        for r in range(a.rounds):
            for name in ("untraced", "recorded", "untraced", "recorded"):
                rec = None
                foreign = set(foreign_tracers())
                if name == "recorded":
                    db = os.path.join(tmp, f"redis-{r}-{len(runs[name])}.db")
                    rec = Recorder(tools["loopscope"], pid, db, ["--wait-hook", a.wait_hook])
                    rec.__enter__()
                try:
                    c0, t0 = cpu_seconds(pid), time.monotonic_ns()
                    tests, reqs, secs = redis_bench(port, n)
                    t1, cpu = time.monotonic_ns(), (cpu_seconds(pid) - c0) / reqs
                    foreign.update(foreign_tracers({rec.bg.proc.pid} if rec else ()))
                finally:
                    if rec:
                        rec.__exit__(*sys.exc_info())
                marked += bool(foreign)
                star = f"  * other tracers ran: {sorted(foreign)}" if foreign else ""
                ips, extra = None, ""
                if rec:
                    meta, _, ips = rec.trace(t0, t1)
                    os.unlink(db)
                    if ips is None:
                        raise RuntimeError("no loop window lies within the redis-benchmark run")
                    extra = (f" {ips:8.0f} {ips / (reqs / secs):8.2f} "
                             f"{meta.get('blocking_episodes', '?'):>8} {dropped(meta):7d}")
                runs[name].append((reqs / secs, tests["SET"][1] / 2 + tests["GET"][1] / 2, cpu,
                                   ips))
                for t in ("SET", "GET"):
                    per_test[name][t].append(tests[t])
                print(f"{r + 1:5d} {name:10} {tests['SET'][0]:8.0f} {tests['SET'][1] * 1e3:6.3f} "
                      f"{tests['GET'][0]:8.0f} {tests['GET'][1] * 1e3:6.3f} {reqs / secs:8.0f} "
                      f"{cpu * 1e6:6.2f}{extra}{star}", flush=True)
            if server.poll() is not None:
                raise RuntimeError(f"redis-server exited ({server.returncode})")
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    print()
    print("redis per test: medians of the rates and p99 that redis-benchmark reports")
    print(f"{'test':5} {'untraced/s':>10} {'recorded/s':>10} {'ratio':>6} {'p99 ms':>7} "
          f"{'recorded':>8} {'ratio':>6}")
    for t in ("SET", "GET"):
        u, rr = per_test["untraced"][t], per_test["recorded"][t]
        ur, rrate = median([x[0] for x in u]), median([x[0] for x in rr])
        up, rp = median([x[1] for x in u]), median([x[1] for x in rr])
        print(f"{t:5} {ur:10.0f} {rrate:10.0f} {rrate / ur:6.3f} {up * 1e3:7.3f} "
              f"{rp * 1e3:8.3f} {rp / up:6.3f}")
    return summarize_server("redis", runs, "req/s", "; p99: the mean of SET's and GET's",
                            marked=marked)


def redis_version(binary):
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"v=(\S+)", out)
    return m.group(1) if m else "?"


# ------------------------------------------------------------------------ main

def main():
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=5, help="seconds per wrk / redis run")
    ap.add_argument("--iters", type=int, default=1000000,
                    help="epoll_spin iterations per measurement")
    ap.add_argument("--reps", type=int, default=3,
                    help="micro: measurements per process and mode in a round")
    ap.add_argument("--parts", default="micro,http,redis")
    ap.add_argument("--wait-hook", default="tracepoint", choices=("tracepoint", "raw"),
                    help="the recorder's --wait-hook in the http and redis parts")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    a = ap.parse_args()
    parts = a.parts.split(",")
    if set(parts) - {"micro", "http", "redis"}:
        ap.error(f"--parts: unknown part in {a.parts!r}")
    if a.quick:
        a.rounds, a.seconds, a.iters, a.reps = 1, 1, 20000, 1
    a.build = os.path.abspath(a.build)
    cpu_env = os.environ.get("BENCH_CPU", str(os.cpu_count() - 1))
    a.cpu = int(cpu_env) if cpu_env else None

    if os.geteuid() != 0:
        print("generic_overhead: recording needs root (BPF)")
        return 77
    tools = {t: shutil.which(t) for t in ("wrk", "redis-server", "redis-benchmark",
                                          "redis-cli", "bpftrace")}
    need = {"http": ["wrk"], "redis": ["redis-server", "redis-benchmark", "redis-cli"]}
    missing = [t for p in parts for t in need.get(p, []) if not tools[t]]
    if missing:
        print(f"generic_overhead: not installed: {', '.join(missing)} "
              "(apt-get install wrk redis-server)")
        return 77
    tools["loopscope"] = os.path.join(a.build, "viewer", "loopscope")
    if not os.access(tools["loopscope"], os.X_OK):
        print(f"generic_overhead: {tools['loopscope']} is not built")
        return 1

    tmp = tempfile.mkdtemp(prefix="ls-generic-bench-")
    t_start = time.monotonic()
    try:
        out = {}
        for p in parts:
            if p != parts[0]:
                print()
            out[p] = {"micro": part_micro, "http": part_http, "redis": part_redis}[p](a, tools,
                                                                                        tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(f"summary (goals are informational; nothing fails on them); "
          f"{time.monotonic() - t_start:.0f} s; {load()}")
    print(f"{'figure':64} {'measured':>10}  goal")
    print("(+ns: mode - untraced, medians, CPU time of the measured thread)")
    if "micro" in out:
        res = out["micro"]
        base = res["untraced"]
        for name in ("generic", "generic --wait-calls all"):
            t = res[name]["target"]
            print(f"{'+ns per iteration of the recorded loop, ' + name:64} "
                  f"{median(t) - median(base['target']):10.1f}  <= 150 ns "
                  f"(median; min - min: {min(t) - min(base['target']):.1f})")
        for p, what in (("bystander", "epoll_wait"), ("getppid", "getppid")):
            d = median(res["generic"][p]) - median(base[p])
            print(f"{'+ns per ' + what + ' of a process not recorded (generic)':64} "
                  f"{d:+10.1f}  no measurable change ({d / median(base[p]):+.1%})")
    for p in ("http", "redis"):
        if p in out:
            s = out[p]
            print(f"{p + ' throughput recorded / untraced':64} {s['ratio']:10.3f}  >= 0.97")
            print(f"{p + ' p99 recorded / untraced':64} {s['p99_ratio']:10.3f}")
            print(f"{p + ' added server CPU per loop iteration, ns':64} {s['ns_iter']:10.0f}  "
                  f"(at {s['ips']:.0f} iterations/s)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as exc:
        print(f"generic_overhead: {exc}", file=sys.stderr)
        sys.exit(1)
