#!/usr/bin/env python3
"""http_overhead.py -- what recording costs a real server: examples/http_server under wrk.

    tests/bench/http_overhead.py [--build DIR] [--before-build DIR]
                                 [--modes LIST] [--rounds N] [--seconds S]
                                 [--connections C] [--threads T] [--max-steal PCT]
                                 [--wait-calm S] [--settle S]

Needs root (BPF) and wrk.  Starts BUILD/examples/http_server on a free port
and drives `GET /` (a short body, keep-alive) with `wrk -c C -t T -d S`, in
rounds of eight runs:

    untraced, recorded (full), untraced, recorded (--no-blocking),
    untraced, recorded (--priority batch: the recorder as SCHED_BATCH, not
    SCHED_IDLE as by default), untraced, recorder stopped
    (and, only when asked for: untraced, recorded (--priority idle: the
    default, given explicitly, as older builds' default differed);
    untraced, recorded (--priority normal: the recorder as any thread);
    untraced, recorded in full into /dev/shm (tmpfs: no disk writes, no
    fsync, no journal or writeback threads -- what the trace's I/O costs
    the machine); untraced, "batch semaphore raised": no recorder, no
    BPF, the server's evl:batch semaphore raised by hand with
    probe_sem_read --add, so that libevl records every event into its
    buffer and hands each full one to a probe site with no uprobe on it --
    libevl's own share of recording, without the uprobe trap and the BPF
    programs that "recorder stopped" adds; untraced, "recorder stopped,
    --no-blocking": the same without blocking detection's programs;
    untraced, "stopped, no-blocking, ring full": the same with a 256 KiB
    ring buffer, full a few milliseconds after the stop, so that each
    batch costs the server the uprobe trap and a failed reservation, not
    the copy of its records)

("recorder stopped": attached in full, then stopped with SIGSTOP for the
wrk run and let go after it: the probes and BPF programs run, the ring
fills and drops, the recorder takes no CPU -- what recording costs the
server apart from the recorder's own work; its event columns count only
what the ring held.)

so every recorded run has an untraced neighbour and a slow phase of the
machine hurts both modes alike.  With --before-build DIR each round starts
with one more pair, untraced and "recorded (full, before)": the same
server recorded by DIR's loopscope, for a change's before and after in
one run.  --modes full,stopped (a comma list of full, no-blocking, idle,
batch, normal, stopped, stopped-no-blocking, stopped-ring-full, shm, sem;
default full, no-blocking, batch, stopped)
keeps only those pairs, for more rounds of a comparison in the same time.
"recorded" means `loopscope record -p PID
-q -o TMP.db` attached to the server for the whole wrk run (wrk starts once
every probe semaphore of the server is raised, read with probe_sem_read, so
the run is recorded from its first request).

Prints one line per run, then per mode: median throughput and p99 latency,
their ratios to the untraced median, the events recorded per second and per
request, the recorder's own CPU time per event while wrk ran (on a 2-CPU
machine it competes with the server and wrk), the trace's bytes per event,
how long the recorder took to end once wrk was done (SIGINT to exit:
detach, drain, derive, indexes; the server no longer traced), and two
costs per recorded event:

    wall: (1/rps_recorded - 1/rps_untraced) / events_per_request
    cpu:  (cpu_per_req_recorded - cpu_per_req_untraced) / events_per_request

The server is one loop thread kept busy by C connections, so its time per
request is about 1/rps: "wall" is everything recording costs the server's
throughput, including the recorder and wrk competing for the machine's
CPUs.  "cpu" is the server process's own CPU time (utime + stime from
/proc/PID/stat) per request: what runs on the traced thread (uprobe traps,
BPF programs, cache effects), the figure to compare with tracer_bench.py's
micro-benchmark, whose loop does nothing but yield.

Last, the paired ratios: each recorded run against the mean of the
untraced runs right before and after it, median and range over the rounds.
The machine's speed drifts between runs by more than the cost sought, and
the ratio of two medians taken from different runs drifts with it; the
paired ratio compares runs made seconds apart.  The test machine is a
virtual machine whose host takes CPU time from it at times (the "steal"
of /proc/stat, printed per run): a second paired summary keeps only the
recorded runs where the run and both its neighbours saw less steal than
--max-steal percent of the machine's CPU time (default 1).  Each paired
median comes with its 95 % confidence interval where there are 6 runs or
more (distribution-free: order statistics of the paired ratios, by the
binomial distribution; it assumes the pairs independent).  With
--wait-calm SECONDS each round first waits, up to that long, until two
CPUs spinning for a second see less steal than that.  --settle SECONDS
sleeps that long after each recorded run: a recorder that frees a large
backlog leaves the host of this virtual machine work for seconds after
it exited (taking the freed memory back), which lands on the next run,
an untraced one, as steal and p99 spikes of milliseconds, and a spinning
probe right after the exit does not see it coming
(results/http_overhead_backlog512.txt, _hold_timer.txt: untraced runs
after a recorder of --backlog 512M had 0.4-1 % steal and p99s of 1-5 ms).

A benchmark, not a test: it prints numbers, it does not pass or fail.  Exit
status 77 when not root or wrk is missing, 1 when a run fails.  Temporary
traces go to a directory that is removed on exit, even on failure.
"""
import argparse
import math
import os
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from tracer_bench import dropped, exit_on_sigterm  # the same helpers, one copy
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lstrace  # noqa: E402  (tests/lstrace.py: events needs loopscope's SQLite extension)

UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def cpu_ticks():
    """The machine's CPU time so far from /proc/stat: (steal, total) ticks."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[7], sum(v[:8])


def probe_steal(seconds=1.0):
    """The steal seen while every CPU spins for `seconds` (a share)."""
    s0 = cpu_ticks()
    spin = "import time\nt = time.monotonic() + %f\nwhile time.monotonic() < t: pass" % seconds
    procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 1)]
    for p in procs:
        p.wait()
    s1 = cpu_ticks()
    return (s1[0] - s0[0]) / max(s1[1] - s0[1], 1)


def wait_calm(limit, budget):
    """Before a round: until the host leaves the machine its CPUs (steal
    below limit while spinning) or `budget` seconds passed; prints what it
    saw.  Returns the last steal measured."""
    end = time.monotonic() + budget
    while True:
        steal = probe_steal()
        if steal < limit or time.monotonic() >= end:
            print(f"      (host steal while spinning: {steal * 100:.2f} %)", flush=True)
            return steal
        time.sleep(5)


def wrk(url, seconds, connections, threads):
    """One wrk run: (requests/s, p99 latency in seconds, requests, steal):
    steal is the share of the machine's CPU time the hypervisor gave to
    others during the run (the steal column of /proc/stat)."""
    s0 = cpu_ticks()
    cmd = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s",
           "--latency", url]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    rps = re.search(r"^Requests/sec:\s+([0-9.]+)", p.stdout, re.M)
    p99 = re.search(r"^\s+99%\s+([0-9.]+)(us|ms|s)\s*$", p.stdout, re.M)
    total = re.search(r"^\s+(\d+) requests in", p.stdout, re.M)
    errors = re.search(r"Socket errors:.*|Non-2xx.*", p.stdout)
    if p.returncode != 0 or not (rps and p99 and total):
        raise RuntimeError(f"wrk failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    if errors:
        raise RuntimeError(f"wrk reported errors: {errors.group(0)}\n{p.stdout}")
    s1 = cpu_ticks()
    steal = (s1[0] - s0[0]) / max(s1[1] - s0[1], 1)
    return (float(rps.group(1)), float(p99.group(1)) * UNITS[p99.group(2)], int(total.group(1)),
            steal)



def median_ci(xs, level=0.95):
    """A distribution-free confidence interval for the median of xs: the
    order statistics x(d) and x(n+1-d) (1-based), d the largest with
    P(Binomial(n, 1/2) <= d - 1) <= (1 - level) / 2; None below 6 values."""
    s, n = sorted(xs), len(xs)
    d, tail = 0, 0.0
    while d < n and tail + math.comb(n, d) / 2 ** n <= (1 - level) / 2:
        tail += math.comb(n, d) / 2 ** n
        d += 1
    return (s[d - 1], s[n - d]) if d >= 1 else None


def cpu_seconds(pid):
    """User + system CPU time of a process (all its threads) so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def raised_semaphores(sem_read, pid):
    """The names of the server's evl probe semaphores that are nonzero."""
    r = subprocess.run([sem_read, str(pid)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"probe_sem_read {pid}: {r.stderr.strip()}")
    return frozenset(line.split()[0] for line in r.stdout.splitlines()
                     if line.strip() and int(line.split()[1]) > 0)


def sem_add(sem_read, pid, name, delta):
    """Add delta to the server's evl:name semaphore (no tracer attached)."""
    r = subprocess.run([sem_read, str(pid), "--add", name, str(delta)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError(f"probe_sem_read {pid} --add {name} {delta}: {r.stderr.strip()}")


class Recorder:
    """`loopscope record -p PID` for the duration of a with-block."""

    def __init__(self, loopscope, sem_read, pid, db, extra, url):
        self.cmd = [loopscope, "record", "-p", str(pid), "-q", "-o", db, *extra]
        self.sem_read, self.pid, self.db, self.url = sem_read, pid, db, url
        self.proc = None

    def __enter__(self):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        # Attached = the set of raised semaphores is nonempty and has not
        # changed for 5 reads (0.25 s): the recorder attaches its probes one
        # by one, and in batched mode only some of them (loop_*, batch).
        deadline = time.monotonic() + 30
        last, stable = frozenset(), 0
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{' '.join(self.cmd)} exited {self.proc.returncode}:\n"
                                   f"{self.proc.stdout.read()}")
            if self.sem_read:
                now = raised_semaphores(self.sem_read, self.pid)
                stable = stable + 1 if now and now == last else 0
                last = now
                if stable >= 5:
                    break
            elif time.monotonic() > deadline - 27:   # no probe_sem_read: wait 3 s
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the recorder did not raise the probe semaphores in 30 s")
            time.sleep(0.05)
        # One request, so that the loop hands the recorder a first batch
        # (at most EVL_TRACE_FLUSH_NS, 10 ms, later) and the recorder tells
        # it that it reads kept batches: until then each batch is copied
        # (tracer/README.md, "Kept batches"), and a recorder stopped before
        # would measure the copy, not what recording costs today.
        urllib.request.urlopen(self.url, timeout=10).read()
        time.sleep(0.2)
        return self

    def __exit__(self, *exc):
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.end_s = time.monotonic() - t0
        out = self.proc.stdout.read()
        self.proc.stdout.close()
        if exc[0] is None and self.proc.returncode != 0:
            raise RuntimeError(f"{' '.join(self.cmd)} exited {self.proc.returncode}:\n{out}")
        return False

    def events(self):
        con = sqlite3.connect(self.db)
        try:
            n = lstrace.event_count(con)
            meta = dict(con.execute("SELECT key, value FROM meta"))
        finally:
            con.close()
        return n, dropped(meta), meta.get("priority_raises", "-")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]




def main():
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--before-build", help="also record with this build's loopscope")
    ap.add_argument("--modes", default="full,no-blocking,batch,stopped",
                    help="which recorded modes (comma list of full, no-blocking, idle, batch, "
                         "normal, stopped, stopped-no-blocking, stopped-ring-full, shm, sem)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=5, help="seconds per wrk run")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1, help="wrk threads")
    ap.add_argument("--max-steal", type=float, default=1.0,
                    help="percent: the second paired summary keeps the recorded runs "
                         "whose run and untraced neighbours all had less steal")
    ap.add_argument("--wait-calm", type=float, default=0, metavar="SECONDS",
                    help="before each round, wait up to this long for the host to steal "
                         "less than --max-steal from CPUs that spin")
    ap.add_argument("--settle", type=float, default=0, metavar="SECONDS",
                    help="after each recorded run, sleep this long (the host takes "
                         "freed memory back)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("http_overhead: recording needs root (BPF)")
        return 77
    if not shutil.which("wrk"):
        print("http_overhead: wrk is not installed (apt-get install wrk)")
        return 77
    build = os.path.abspath(a.build)
    server_bin = os.path.join(build, "examples", "http_server")
    loopscope = os.path.join(build, "viewer", "loopscope")
    sem_read = os.path.join(build, "tests", "probes", "probe_sem_read")
    if not os.access(sem_read, os.X_OK):
        print(f"note: no {sem_read}: waiting 3 s for each attach instead")
        sem_read = None
    before = (os.path.join(os.path.abspath(a.before_build), "viewer", "loopscope")
              if a.before_build else None)
    for b in (server_bin, loopscope, before):
        if b and not os.access(b, os.X_OK):
            print(f"http_overhead: {b} is not built")
            return 1

    BEFORE = "recorded (full, before)"
    known = {"full": ("recorded (full)", []),
             "no-blocking": ("recorded (--no-blocking)", ["--no-blocking"]),
             "idle": ("recorded (--priority idle)", ["--priority", "idle"]),
             "batch": ("recorded (--priority batch)", ["--priority", "batch"]),
             "normal": ("recorded (--priority normal)", ["--priority", "normal"]),
             "stopped": ("recorder stopped", ["STOP"]),
             "stopped-no-blocking": ("recorder stopped, --no-blocking", ["STOP", "--no-blocking"]),
             "stopped-ring-full": ("stopped, no-blocking, ring full",
                                   ["STOP", "--no-blocking", "--ringbuf-kb", "256"]),
             "shm": ("recorded (trace in /dev/shm)", ["SHM"]),
             "sem": ("batch semaphore raised", ["SEM"])}
    wanted = [m for m in a.modes.split(",") if m]
    if not wanted or any(m not in known for m in wanted):
        print(f"http_overhead: --modes: a comma list of {', '.join(known)}")
        return 2
    if "sem" in wanted and not sem_read:
        print("http_overhead: --modes sem needs probe_sem_read")
        return 1
    modes = [("untraced", None), (BEFORE, [])] if before else []
    for m in wanted:
        modes += [("untraced", None), known[m]]
    recorded = [name for name, extra in modes if extra is not None]
    runs = {name: [] for name, _ in modes}
    order = []                        # (name, rps, p99, steal) in run order, for the paired ratios
    tmp = tempfile.mkdtemp(prefix="ls-http-bench-")
    shm = tempfile.mkdtemp(prefix="ls-http-bench-", dir="/dev/shm") if "shm" in wanted else None
    server = None
    try:
        port = free_port()
        server = subprocess.Popen([server_bin, "--port", str(port)], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        first = server.stdout.readline()
        m = re.match(r"pid (\d+)", first)
        if not m:
            raise RuntimeError(f"http_server printed {first!r}")
        pid = int(m.group(1))
        server.stdout.readline()  # "port P"
        url = f"http://127.0.0.1:{port}/"
        wrk(url, 1, a.connections, a.threads)  # warm up (page faults, task stacks)

        print(f"http_overhead: {server_bin} GET / under wrk -t{a.threads} -c{a.connections} "
              f"-d{a.seconds}s, {a.rounds} rounds")
        if before:
            print(f"before: {before}")
        print(f"{'round':>5} {'mode':26} {'req/s':>9} {'p99 ms':>7} {'cpu us':>7} "
              f"{'steal%':>6} {'events/s':>9} {'ev/req':>6} {'dropped':>7} {'rec ns/ev':>9} {'B/ev':>5} "
              f"{'end s':>5} {'raises':>6}")
        print("(cpu us: the server's CPU time per request; steal%: the machine's CPU time\n"
              " the hypervisor gave to others during the run; rec ns/ev: the recorder's CPU\n"
              " time while wrk ran, per event; B/ev: the finished trace's bytes per event;\n"
              " end s: SIGINT to the recorder's exit; raises: how often the watchdog\n"
              " raised the recorder from SCHED_IDLE, meta priority_raises)")
        for r in range(a.rounds):
            if a.wait_calm > 0:
                wait_calm(a.max_steal / 100, a.wait_calm)
            for name, extra in modes:
                if extra is None or extra == ["SEM"]:
                    if extra:
                        sem_add(sem_read, pid, "batch", 1)
                        time.sleep(0.1)   # the loop reads it once an iteration
                    try:
                        cpu0 = cpu_seconds(pid)
                        rps, p99, total, steal = wrk(url, a.seconds, a.connections, a.threads)
                        cpu = (cpu_seconds(pid) - cpu0) / total
                    finally:
                        if extra:
                            sem_add(sem_read, pid, "batch", -1)
                    ev = evs = evr = dropped = rec_ns = bpe = end_s = raises = None
                else:
                    in_shm, stop = "SHM" in extra, "STOP" in extra
                    db = os.path.join(shm if in_shm else tmp, f"r{r}-{recorded.index(name)}.db")
                    rec = Recorder(before if name == BEFORE else loopscope, sem_read, pid, db,
                                   [x for x in extra if x not in ("SHM", "STOP")], url)
                    with rec:
                        if stop:          # the probes fire, nobody drains
                            rec.proc.send_signal(signal.SIGSTOP)
                        cpu0, rcpu0 = cpu_seconds(pid), cpu_seconds(rec.proc.pid)
                        rps, p99, total, steal = wrk(url, a.seconds, a.connections, a.threads)
                        cpu = (cpu_seconds(pid) - cpu0) / total
                        rcpu = cpu_seconds(rec.proc.pid) - rcpu0
                        if stop:
                            rec.proc.send_signal(signal.SIGCONT)
                    ev, dropped, raises = rec.events()
                    bpe = os.path.getsize(db) / max(ev, 1)
                    os.unlink(db)
                    evs, evr = ev / a.seconds, ev / total
                    rec_ns = rcpu / max(ev, 1) * 1e9
                    end_s = rec.end_s
                runs[name].append((rps, p99, evs, evr, dropped, cpu, rec_ns, bpe, end_s))
                order.append((name, rps, p99, steal))
                extra_cols = ("" if evs is None else
                              f" {evs:9.0f} {evr:6.2f} {dropped:7d} {rec_ns:9.0f} {bpe:5.1f}"
                              f" {end_s:5.2f} {raises:>6}")
                print(f"{r + 1:5d} {name:26} {rps:9.0f} {p99 * 1e3:7.2f} {cpu * 1e6:7.2f}"
                      f" {steal * 100:6.2f}{extra_cols}", flush=True)
                if a.settle > 0 and evs is not None:   # after a recorded run
                    time.sleep(a.settle)
            if server.poll() is not None:
                raise RuntimeError(f"http_server exited ({server.returncode})")
    finally:
        if server is not None and server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
        if shm:
            shutil.rmtree(shm, ignore_errors=True)

    base = runs["untraced"]
    base_rps = statistics.median(x[0] for x in base)
    base_p99 = statistics.median(x[1] for x in base)
    base_cpu = statistics.median(x[5] for x in base)
    print()
    print(f"medians over {a.rounds} rounds ({len(base)} untraced runs); ratio = mode / untraced;")
    print("ns/event: added cost per recorded event, from throughput (wall) and from the")
    print("server's CPU time per request (cpu)")
    print(f"{'mode':26} {'req/s':>9} {'ratio':>6} {'p99 ms':>7} {'ratio':>6} {'cpu us':>7} "
          f"{'events/s':>9} {'ev/req':>6} {'ns/ev wall':>10} {'ns/ev cpu':>9} {'rec ns/ev':>9} "
          f"{'B/ev':>5} {'end s':>5}")
    print(f"{'untraced':26} {base_rps:9.0f} {1:6.3f} {base_p99 * 1e3:7.2f} {1:6.3f} "
          f"{base_cpu * 1e6:7.2f}")
    for name in recorded:
        v = runs[name]
        rps = statistics.median(x[0] for x in v)
        p99 = statistics.median(x[1] for x in v)
        if v[0][2] is None:           # sem: nothing recorded
            cpu = statistics.median(x[5] for x in v)
            print(f"{name:26} {rps:9.0f} {rps / base_rps:6.3f} {p99 * 1e3:7.2f} "
                  f"{p99 / base_p99:6.3f} {cpu * 1e6:7.2f}")
            continue
        evs = statistics.median(x[2] for x in v)
        evr = statistics.median(x[3] for x in v)
        cpu = statistics.median(x[5] for x in v)
        rec_ns = statistics.median(x[6] for x in v)
        bpe = statistics.median(x[7] for x in v)
        end_s = statistics.median(x[8] for x in v)
        wall_ns = (1 / rps - 1 / base_rps) / evr * 1e9
        cpu_ns = (cpu - base_cpu) / evr * 1e9
        print(f"{name:26} {rps:9.0f} {rps / base_rps:6.3f} {p99 * 1e3:7.2f} "
              f"{p99 / base_p99:6.3f} {cpu * 1e6:7.2f} {evs:9.0f} {evr:6.2f} "
              f"{wall_ns:10.0f} {cpu_ns:9.0f} {rec_ns:9.0f} {bpe:5.1f} {end_s:5.2f}")
    # The machine's speed drifts between runs (the untraced runs above
    # spread wider than the cost sought), so the ratio of two medians
    # taken from different runs moves with it.  Paired: each recorded run
    # against the mean of the untraced runs just before and after it.
    for limit in (None, a.max_steal / 100):
        print()
        print("paired: each recorded run / the mean of its two untraced neighbours; median, "
              "(min .. max)" + ("" if limit is None else
                               f";\nonly where the run and both neighbours had steal < "
                               f"{a.max_steal:g} %"))
        for name in recorded:
            tp, lat = [], []
            for i, (n, rps, p99, steal) in enumerate(order):
                nb = [order[j] for j in (i - 1, i + 1)
                      if 0 <= j < len(order) and order[j][0] == "untraced"]
                if n != name or not nb:
                    continue
                if limit is not None and (len(nb) < 2 or
                                          max([steal] + [x[3] for x in nb]) >= limit):
                    continue
                tp.append(rps / statistics.mean(x[1] for x in nb))
                lat.append(p99 / statistics.mean(x[2] for x in nb))
            if not tp:
                print(f"{name:26} no such run")
                continue
            print(f"{name:26} throughput {statistics.median(tp):.3f}x ({min(tp):.3f} .. "
                  f"{max(tp):.3f})  p99 {statistics.median(lat):.2f}x ({min(lat):.2f} .. "
                  f"{max(lat):.2f})  {len(tp)} runs")
            ci_tp, ci_lat = median_ci(tp), median_ci(lat)
            if ci_tp:
                print(f"{'':26} 95 % confidence interval of the median: throughput "
                      f"{ci_tp[0]:.3f} .. {ci_tp[1]:.3f}x, p99 {ci_lat[0]:.2f} .. {ci_lat[1]:.2f}x")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as exc:
        print(f"http_overhead: {exc}", file=sys.stderr)
        sys.exit(1)
