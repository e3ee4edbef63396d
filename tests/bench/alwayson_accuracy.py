#!/usr/bin/env python3
"""alwayson_accuracy.py -- what the agent's always-on mode misses.

    tests/bench/alwayson_accuracy.py [--build DIR] [--requests N] [--threshold MS]
                                     [--targets python,redis,blocking_server]

The agent's default, `--wait-hook switch`, sees a generic loop's wait calls
only when they sleep (from sched_switch; no syscall hook).  This measures
what that loses against the full generic mode (`--wait-hook tracepoint`,
every wait call seen), both recording the same target at the same time,
with the same --block-threshold:

python          tests/tracer/generic/py_server.py: its sleep (50 ms off-CPU),
                cpu (30 ms on-CPU) and poll (60 ms off-CPU) routes
redis           Debian's redis-server: DEBUG SLEEP 0.05 (off-CPU) and KEYS *
                over 300000 keys (on-CPU)
blocking_server examples/blocking_server in --mode generic: its sleep, pipe,
                fsync (off-CPU) and spin (on-CPU) routes

Each target is driven twice: "quiet" (the blocking requests alone, in a
random order, 20-80 ms apart) and "loaded" (the same beside a client that
keeps the loop busy: 8 clients of py_server's good route; redis-benchmark
-c 32 -P 16 on redis, which keeps redis at full CPU, its epoll_wait seldom
sleeping; blocking_server has no fast route: its loaded run is a second
quiet one).

For each run: the reference's episodes of at least the threshold, the share
the switch recording has (an episode of the same kind on the same thread
that overlaps it), the error of its duration (switch minus reference,
median and worst, in ms), and the switch recording's episodes that match
no reference episode (false ones); and the loop iterations it counted, as a
share of the reference's (it counts only those that end in a sleep, and
those a CPU sample finds in a wait call).  A benchmark: it prints numbers and
fails only when something breaks (a target or recorder dies).
"""
import argparse
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def line_of(proc, prefix, timeout=20):
    """The first stdout line of PROC starting with PREFIX, its rest."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        l = proc.stdout.readline()
        if not l:
            break
        if l.startswith(prefix):
            return l[len(prefix):].strip()
    raise RuntimeError(f"{proc.args[0]} never printed {prefix!r}")


class Recording:
    """loopscope record -p PID with extra arguments, until stop()."""

    def __init__(self, loopscope, pid, out, args):
        self.out = out
        self.p = subprocess.Popen([loopscope, "record", "-p", str(pid), "-o", out, *args],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        self.err = []
        while True:
            l = self.p.stderr.readline()
            if not l:
                raise RuntimeError(f"recorder exited: {''.join(self.err)}")
            self.err.append(l)
            if l.startswith("recording pid"):
                break
        threading.Thread(target=lambda: self.err.extend(self.p.stderr), daemon=True).start()

    def stop(self):
        self.p.send_signal(signal.SIGINT)
        if self.p.wait(60) != 0:
            raise RuntimeError(f"recorder failed: {''.join(self.err)}")
        db = sqlite3.connect(self.out)
        rows = db.execute("SELECT loop_id, kind, start_ns, dur_ns FROM blocking").fetchall()
        self.iterations = db.execute("SELECT coalesce(sum(iterations), 0) FROM loop_windows"
                                     ).fetchone()[0]
        db.close()
        return rows


def match(ref, sw, thr_ns):
    """(reference episodes >= thr, caught, duration errors, false ones)."""
    want = [e for e in ref if e[3] >= thr_ns]
    used, errs, caught = set(), [], 0
    for loop, kind, s, d in want:
        best = None
        for i, (l2, k2, s2, d2) in enumerate(sw):
            if i in used or l2 != loop or k2 != kind:
                continue
            if s2 < s + d and s < s2 + d2:
                best = i
                break
        if best is not None:
            used.add(best)
            caught += 1
            errs.append((sw[best][3] - d) / 1e6)
    false = [e for i, e in enumerate(sw)
             if i not in used and not any(r[0] == e[0] and r[2] < e[2] + e[3] and e[2] < r[2] + r[3]
                                          for r in ref)]
    return len(want), caught, errs, false


def near(ref, loop, start):
    """The reference episode on loop nearest to start, said."""
    on = [e for e in ref if e[0] == loop]
    if not on:
        return "none"
    e = min(on, key=lambda e: abs(e[2] - start))
    return (f"{'off' if e[1] == 1 else 'on'}-CPU {e[3] / 1e6:.2f} ms, "
            f"{(e[2] - start) / 1e6:+.1f} ms away")


# ---------------------------------------------------------------- targets

class LineServer:
    """A server that prints "pid N" and "port P" and answers one line, a
    route, per connection (py_server.py, blocking_server)."""

    def spawn(self, cmd, d):
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=d)
        self.pid = int(line_of(self.p, "pid "))
        self.port = int(line_of(self.p, "port "))

    def request(self, route):
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as c:
            c.sendall(route.encode() + b"\n")
            c.recv(200)

    def stop(self):
        self.p.kill()
        self.p.wait()


class Python(LineServer):
    name = "python"
    routes = ["sleep", "cpu", "poll"]

    def start(self, a, d):
        self.spawn([sys.executable, os.path.join(ROOT, "tests", "tracer", "generic",
                                                 "py_server.py")], d)

    def load(self, stop):
        def client():
            while not stop.is_set():
                self.request("good")
        return [threading.Thread(target=client, daemon=True) for _ in range(8)]


class Redis:
    name = "redis"
    routes = ["sleep", "keys"]

    def start(self, a, d):
        self.port = free_port()
        self.p = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                   "--save", "", "--appendonly", "no", "--dir", d,
                                   "--enable-debug-command", "local", "--daemonize", "no",
                                   "--loglevel", "warning"], stdout=subprocess.DEVNULL, cwd=d)
        self.pid = self.p.pid
        for _ in range(200):
            try:
                self.c = socket.create_connection(("127.0.0.1", self.port), timeout=60)
                break
            except OSError:
                time.sleep(0.05)
        self.cmd("DEBUG", "POPULATE", "300000")

    def cmd(self, *args):
        req = f"*{len(args)}\r\n" + "".join(f"${len(x)}\r\n{x}\r\n" for x in args)
        self.c.sendall(req.encode())
        buf = b""
        while True:
            buf += self.c.recv(1 << 20)
            if buf.startswith(b"+") and buf.endswith(b"\r\n"):
                return buf
            if buf.startswith(b"*") and buf.count(b"\r\n") >= 1 + 2 * int(buf[1:buf.index(b"\r\n")]):
                return buf

    def request(self, route):
        self.cmd(*(("DEBUG", "SLEEP", "0.05") if route == "sleep" else ("KEYS", "*")))

    def load(self, stop):
        def bench():
            while not stop.is_set():
                subprocess.run(["redis-benchmark", "-p", str(self.port), "-t", "get,set", "-c", "32",
                                "-P", "16", "-n", "400000", "-q"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        return [threading.Thread(target=bench, daemon=True)]

    def stop(self):
        self.c.close()
        self.p.kill()
        self.p.wait()


class BlockingServer(LineServer):
    name = "blocking_server"
    routes = ["sleep", "pipe", "fsync", "spin"]
    extra = ["--mode", "generic"]

    def start(self, a, d):
        self.spawn([os.path.join(a.build, "examples", "blocking_server"), "--port", "0"], d)

    def load(self, stop):
        return []


TARGETS = {t.name: t for t in (Python, Redis, BlockingServer)}


def run(a, cls, loaded, d):
    t = cls()
    t.start(a, d)
    extra = getattr(t, "extra", [])
    common = ["--block-threshold", str(a.threshold), *extra]
    recs = [Recording(a.loopscope, t.pid, os.path.join(d, f"{t.name}-{loaded}-{h}.db"),
                      ["--wait-hook", h, *common]) for h in ("tracepoint", "switch")]
    stop = threading.Event()
    bg = t.load(stop) if loaded else []
    for th in bg:
        th.start()
    time.sleep(0.5)
    rnd = random.Random(a.seed)
    reqs = [r for r in t.routes for _ in range(a.requests)]
    rnd.shuffle(reqs)
    for r in reqs:
        t.request(r)
        time.sleep(rnd.uniform(0.02, 0.08))
    time.sleep(0.3)
    stop.set()
    ref, sw = (r.stop() for r in recs)
    iters = recs[1].iterations / recs[0].iterations if recs[0].iterations else float("nan")
    for th in bg:
        th.join(30)
    if t.p.poll() is not None:
        raise RuntimeError(f"{t.name} exited while recorded")
    t.stop()
    n, caught, errs, false = match(ref, sw, a.threshold * 1e6)
    t0 = min([e[2] for e in ref + sw] or [0])
    errs.sort()
    med = errs[len(errs) // 2] if errs else float("nan")
    worst = max(errs, key=abs) if errs else float("nan")
    return (f"{t.name:16} {'loaded' if loaded else 'quiet':7} {len(reqs):5} {n:6} {caught:6} "
            f"{100.0 * caught / n if n else float('nan'):6.1f} % {med:+8.2f} {worst:+8.2f} "
            f"{len(false):6} {100.0 * iters:6.1f} %"
            + "".join(f"\n    false: {'off' if k == 1 else 'on'}-CPU {dur / 1e6:.2f} ms at "
                      f"+{(s - t0) / 1e9:.3f} s (reference's nearest on that thread: "
                      f"{near(ref, l, s)})" for l, k, s, dur in false))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--requests", type=int, default=20, help="of each route, per run")
    ap.add_argument("--threshold", type=float, default=10, help="--block-threshold, ms")
    ap.add_argument("--targets", default="python,redis,blocking_server")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    a.loopscope = os.path.join(a.build, "viewer", "loopscope")
    if os.geteuid() != 0:
        print("alwayson_accuracy.py: needs root (BPF)", file=sys.stderr)
        return 77
    for tool in ("redis-server", "redis-benchmark"):
        if "redis" in a.targets and not shutil.which(tool):
            print(f"alwayson_accuracy.py: {tool} is not installed", file=sys.stderr)
            return 77
    print(f"# always-on (--wait-hook switch) against the full generic mode (--wait-hook "
          f"tracepoint), both recording at once; threshold {a.threshold:g} ms; "
          f"{a.requests} requests of each route per run; load average "
          + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"{'target':16} {'run':7} {'reqs':>5} {'ref>=t':>6} {'caught':>6} {'share':>8} "
          f"{'err med':>8} {'err max':>8} {'false':>6} {'iters':>8}")
    print("# errors: switch - reference, ms; iters: the iterations switch saw, of the reference's")
    with tempfile.TemporaryDirectory(prefix="ls-accuracy-") as d:
        for name in a.targets.split(","):
            for loaded in (False, True):
                print(run(a, TARGETS[name], loaded, d), flush=True)
    print("# load average after: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
