#!/usr/bin/env python3
"""asyncio_lifecycle.py -- what recording an asyncio server's task lifecycle costs it.

    tests/bench/asyncio_lifecycle.py [--build DIR] [--python PY] [--shapes LIST]
                                     [--rounds N] [--seconds S]
                                     [--connections C] [--threads T]

Needs root (BPF) and wrk (exit status 77 otherwise).  The server is
tests/bench/asyncio_http_server.py (stdlib asyncio.start_server, a fixed
keep-alive response) run by PY (default /usr/bin/python3.11, Debian's),
unmodified, under `wrk -tT -cC -dS --latency` (default -t1 -c8 -d10s).
Two server shapes (--shapes conn,request selects; default both), a fresh
server each:

  conn     one task per connection (asyncio.start_server's handler): the
           task set hardly changes while wrk runs
  request  --task-per-request: each request answered in a task of its own
           (create_task + await), the worst case for the lifecycle: two
           uprobe hits (the Task type's tp_init and tp_finalize) and a task
           row per request

Each round runs four modes in this order, so that each recorded run has an
untraced run on each side (one more untraced run closes the last round):

  untraced   nothing attached
  lifecycle  `loopscope record -p PID -o TMP.db`: the default, the generic
             loop mode plus the asyncio task lifecycle (a census of the task
             set every 10 ms, uprobes at tp_init / tp_finalize)
  untraced
  no-tasks   `loopscope record -p PID --no-tasks -o TMP.db`: the generic
             loop mode alone (blocking detection)

A recorded run starts once the recorder has printed "asyncio tasks: a
census every ..." (lifecycle; the recorder saying it has no probes is an
error) or "recording pid ..." (no-tasks) on stderr; the recorder is stopped
with SIGINT after the run and must exit 0.

Per run: requests/s and p99 (wrk), the server's CPU time per request and
the recorder's CPU time per second of the wrk run (utime + stime,
/proc/PID/stat), the trace's size, its tasks and events (`loopscope sql`),
the meta `censuses` and `census_max_gap_ns` (which includes the last
census, taken at the end after the probes are detached: detaching takes
most of `stop s`) and the messages dropped.  Per shape and mode: the
medians; "ratio" is the mode's median over the median of the untraced runs
next to its runs, "paired" the median over its runs of each run's
requests/s over the mean of its two untraced neighbours.  The issue's
target: lifecycle >= 0.90x the untraced throughput.

A benchmark, not a test: it never passes or fails on speed.  It fails (exit
status 1) when something misbehaves: the server or a recorder exits with an
error, wrk reports errors.  Rows measured while another loopscope or
bpftrace ran on the machine are marked *.  Traces go to a temporary
directory removed on exit.
"""
import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tracer_bench import dropped, exit_on_sigterm  # noqa: E402
from http_overhead import cpu_seconds, wrk  # noqa: E402
from generic_overhead import Background, foreign_tracers, load  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = {"conn": ("one task per connection", []),
          "request": ("a task per request (--task-per-request)", ["--task-per-request"])}
ORDER = ("untraced", "lifecycle", "untraced", "no-tasks")
LIFECYCLE_READY = re.compile(r"^asyncio tasks: ")
CENSUS_LINE = re.compile(r"^asyncio tasks: a census every \d+ ms; task creation and destruction "
                         r"probed")
RECORDING = re.compile(r"^recording pid \d+ ")


def median(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def fmt(x, spec, width):
    return f"{'-':>{width}}" if x is None else f"{x:{width}{spec}}"


class Server:
    """asyncio_http_server.py under PY on a free port."""

    def __init__(self, python, extra, log):
        self.log = open(log, "w")
        self.proc = subprocess.Popen([python, os.path.join(HERE, "asyncio_http_server.py"),
                                      *extra], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)
        m = re.match(r"pid (\d+)$", self.proc.stdout.readline().strip())
        p = re.match(r"port (\d+)$", self.proc.stdout.readline().strip())
        if not (m and p):
            self.close()
            raise RuntimeError(f"asyncio_http_server.py did not start under {python} (see {log})")
        self.pid = int(m.group(1))
        self.url = f"http://127.0.0.1:{p.group(1)}/"

    def check(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"asyncio_http_server.py exited ({self.proc.returncode}); "
                               f"see {self.log.name}")

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.log.close()


def trace_facts(loopscope, db):
    """Size, tasks, events, meta of a finished trace."""
    size = sum(os.path.getsize(db + x) for x in ("", "-wal", "-journal")
               if os.path.exists(db + x))
    q = ("SELECT (SELECT count(*) FROM tasks) AS tasks, (SELECT count(*) FROM events) AS events;"
         "SELECT key, value FROM meta")
    p = subprocess.run([loopscope, "sql", db, q, "--json"], capture_output=True, text=True,
                       timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"loopscope sql {db} failed ({p.returncode}): {p.stderr.strip()}")
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    if len(rows) != 2:
        raise RuntimeError(f"loopscope sql {db}: unexpected output {p.stdout[:500]!r}")
    meta = {r["key"]: r["value"] for r in rows[1]}
    out = {"size": size, "tasks": rows[0][0]["tasks"], "events": rows[0][0]["events"],
           "dropped": dropped(meta), "censuses": None, "census_ms": None, "census_bad": 0,
           "max_gap": None, "task_source": meta.get("task_source", "?")}
    m = re.match(r"(\d+) \(mean ([0-9.]+) ms; truncated (\d+), read errors (\d+)\)",
                 str(meta.get("censuses", "")))
    if m:
        out["censuses"], out["census_ms"] = int(m.group(1)), float(m.group(2))
        out["census_bad"] = int(m.group(3)) + int(m.group(4))
    if meta.get("census_max_gap_ns") not in (None, ""):
        out["max_gap"] = int(meta["census_max_gap_ns"]) / 1e6
    return out


def recorded_run(a, loopscope, server, mode, db):
    """One wrk run with the recorder attached: (wrk's figures, recorder facts)."""
    extra = ["--no-tasks"] if mode == "no-tasks" else []
    cmd = [loopscope, "record", "-p", str(server.pid), "-o", db, *extra]
    rec = Background(cmd, " ".join(cmd))
    ok = False
    try:
        rec.wait_for(LIFECYCLE_READY if mode == "lifecycle" else RECORDING, timeout=60)
        if mode == "lifecycle" and not any(CENSUS_LINE.search(l) for l in rec.lines):
            raise RuntimeError(f"the recorder has no lifecycle probes:\n{rec.output()}")
        own = {rec.proc.pid}
        foreign = set(foreign_tracers(own))
        r0, s0, t0 = cpu_seconds(rec.proc.pid), cpu_seconds(server.pid), time.monotonic()
        rps, p99, total, _ = wrk(server.url, a.seconds, a.connections, a.threads)
        r1, s1, t1 = cpu_seconds(rec.proc.pid), cpu_seconds(server.pid), time.monotonic()
        foreign.update(foreign_tracers(own))
        ok = True
    finally:
        stop0 = time.monotonic()
        rec.stop(check=ok)
    stop_s = time.monotonic() - stop0
    facts = trace_facts(loopscope, db)
    os.unlink(db)
    facts.update(rec_cpu=(r1 - r0) / (t1 - t0), stop_s=stop_s)
    return (rps, p99, (s1 - s0) / total, total, foreign), facts


def untraced_run(a, server):
    foreign = set(foreign_tracers())
    s0 = cpu_seconds(server.pid)
    rps, p99, total, _ = wrk(server.url, a.seconds, a.connections, a.threads)
    s1 = cpu_seconds(server.pid)
    foreign.update(foreign_tracers())
    return rps, p99, (s1 - s0) / total, total, foreign


HEAD = (f"{'round':>5} {'mode':9} {'req/s':>8} {'p99 ms':>7} {'srv us':>6} {'rec ms/s':>8} "
        f"{'trace MiB':>9} {'tasks':>7} {'events':>8} {'censuses':>8} {'max gap ms':>10} "
        f"{'dropped':>7} {'stop s':>6}")


def row(rnd, mode, run, facts):
    rps, p99, cpu, _, foreign = run
    f = facts or {}
    line = (f"{rnd:>5} {mode:9} {rps:8.0f} {p99 * 1e3:7.2f} {cpu * 1e6:6.1f} "
            f"{fmt(f.get('rec_cpu') and f['rec_cpu'] * 1e3, '.1f', 8)} "
            f"{fmt(f.get('size') and f['size'] / 2**20, '.2f', 9)} "
            f"{fmt(f.get('tasks'), 'd', 7)} {fmt(f.get('events'), 'd', 8)} "
            f"{fmt(f.get('censuses'), 'd', 8)} {fmt(f.get('max_gap'), '.1f', 10)} "
            f"{fmt(f.get('dropped'), 'd', 7)} {fmt(f.get('stop_s'), '.2f', 6)}")
    notes = []
    if f.get("census_bad"):
        notes.append(f"{f['census_bad']} censuses truncated or unread")
    if foreign:
        notes.append(f"* other tracers ran: {sorted(foreign)}")
    return line + ("  " + "; ".join(notes) if notes else "")


def run_shape(a, loopscope, shape, tmp):
    what, extra = SHAPES[shape]
    server = Server(a.python, extra, os.path.join(tmp, f"server-{shape}.log"))
    seq = []            # (mode, run, facts) in the order measured
    try:
        wrk(server.url, 1, a.connections, a.threads)               # warm up
        print(f"{shape}: asyncio_http_server.py, {what}, under wrk -t{a.threads} "
              f"-c{a.connections} -d{a.seconds}s --latency, {a.rounds} rounds; {load()}")
        print(HEAD)
        print("(srv us: the server's CPU time per request; rec ms/s: the recorder's CPU time "
              "per second of the run; max gap: census_max_gap_ns, which includes the last "
              "census, taken after the probes are detached; stop s: SIGINT to exit)")
        plan = [(r + 1, m) for r in range(a.rounds) for m in ORDER] + [(a.rounds, "untraced")]
        for i, (rnd, mode) in enumerate(plan):
            if mode == "untraced":
                run, facts = untraced_run(a, server), None
            else:
                db = os.path.join(tmp, f"{shape}-{i}.db")
                run, facts = recorded_run(a, loopscope, server, mode, db)
            server.check()
            seq.append((mode, run, facts))
            print(row(rnd if i < len(plan) - 1 else "end", mode, run, facts), flush=True)
    finally:
        server.close()
    return summarize(shape, seq)


def summarize(shape, seq):
    print()
    print(f"{shape} summary ({load()}): medians; ratio: the mode's median over the median of "
          f"the untraced runs next to its runs; paired: the median of each run over the mean "
          f"of its two untraced neighbours")
    print(f"{'mode':9} {'runs':>4} {'req/s':>8} {'ratio':>6} {'paired':>6} {'p99 ms':>7} "
          f"{'ratio':>6} {'srv us':>6} {'rec ms/s':>8} {'trace MiB':>9} {'tasks':>7} "
          f"{'tasks/req':>9} {'events':>8} {'censuses':>8} {'max gap ms':>10} {'marked':>6}")
    out = {}
    for mode in ("untraced", "lifecycle", "no-tasks"):
        idx = [i for i, s in enumerate(seq) if s[0] == mode]
        runs = [seq[i][1] for i in idx]
        facts = [seq[i][2] or {} for i in idx]
        rps, p99 = median([r[0] for r in runs]), median([r[1] for r in runs])
        ratio = pratio = p99r = None
        if mode != "untraced":
            nb = sorted({j for i in idx for j in (i - 1, i + 1)
                         if 0 <= j < len(seq) and seq[j][0] == "untraced"})
            ratio = rps / median([seq[j][1][0] for j in nb])
            p99r = p99 / median([seq[j][1][1] for j in nb])
            pratio = median([seq[i][1][0] / statistics.mean(
                [seq[j][1][0] for j in (i - 1, i + 1) if 0 <= j < len(seq)]) for i in idx])
        else:
            ratio = pratio = p99r = 1.0

        def med(key, scale=1.0):
            v = median([f.get(key) for f in facts])
            return None if v is None else v * scale
        tpr = median([f["tasks"] / r[3] for f, r in zip(facts, runs) if "tasks" in f])
        marked = sum(bool(r[4]) for r in runs)
        tasks, events, cens = med("tasks"), med("events"), med("censuses")
        print(f"{mode:9} {len(runs):4d} {rps:8.0f} {ratio:6.3f} {pratio:6.3f} "
              f"{p99 * 1e3:7.2f} {p99r:6.3f} {median([r[2] for r in runs]) * 1e6:6.1f} "
              f"{fmt(med('rec_cpu', 1e3), '.1f', 8)} {fmt(med('size', 2**-20), '.2f', 9)} "
              f"{fmt(tasks, '.0f', 7)} {fmt(tpr, '.3f', 9)} {fmt(events, '.0f', 8)} "
              f"{fmt(cens, '.0f', 8)} {fmt(med('max_gap'), '.1f', 10)} {marked:6d}")
        out[mode] = {"ratio": ratio, "paired": pratio, "p99_ratio": p99r,
                     "max_gap": max([f["max_gap"] for f in facts if f.get("max_gap")
                                     is not None], default=None)}
    return out


def machine_facts(a, loopscope):
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    pyv = subprocess.run([a.python, "-c", "import sys; print(sys.version.split()[0])"],
                         capture_output=True, text=True).stdout.strip() or "?"
    commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "?"
    print(f"machine: {os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), {model}, "
          f"{platform.system()} {platform.release()}")
    print(f"before:  {load()}")
    print(f"python:  {a.python} {pyv}")
    print(f"recorder: {loopscope} (commit {commit})")
    others = foreign_tracers()
    if others:
        print(f"note:    other loopscope/bpftrace processes run: {others}")
    print()


def main():
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--python", default="/usr/bin/python3.11",
                    help="the interpreter that runs the server (default Debian's 3.11)")
    ap.add_argument("--shapes", default="conn,request",
                    help="server shapes, comma list of conn (a task per connection) and "
                         "request (a task per request)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=int, default=10, help="seconds per wrk run")
    ap.add_argument("--connections", type=int, default=8, help="wrk -c")
    ap.add_argument("--threads", type=int, default=1, help="wrk -t")
    a = ap.parse_args()
    shapes = [s for s in a.shapes.split(",") if s]
    if not shapes or set(shapes) - set(SHAPES):
        ap.error(f"--shapes: expected a comma list of {', '.join(SHAPES)}, got {a.shapes!r}")
    if a.rounds < 1 or a.seconds < 1:
        ap.error("--rounds and --seconds must be >= 1")
    if os.geteuid() != 0:
        print("asyncio_lifecycle: recording needs root (BPF)")
        return 77
    if not shutil.which("wrk"):
        print("asyncio_lifecycle: wrk is not installed (apt-get install wrk)")
        return 77
    if not os.access(a.python, os.X_OK):
        print(f"asyncio_lifecycle: {a.python} is not there (--python)")
        return 1
    loopscope = os.path.join(os.path.abspath(a.build), "viewer", "loopscope")
    if not os.access(loopscope, os.X_OK):
        print(f"asyncio_lifecycle: {loopscope} is not built")
        return 1

    machine_facts(a, loopscope)
    t_start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="ls-lifecycle-bench-")
    out = {}
    try:
        for s in shapes:
            if s != shapes[0]:
                print()
            out[s] = run_shape(a, loopscope, s, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(f"summary ({time.monotonic() - t_start:.0f} s; {load()}): throughput over the "
          f"neighbouring untraced runs (ratio of medians / median of paired ratios)")
    print(f"{'shape':8} {'mode':9} {'ratio':>6} {'paired':>6} {'p99 ratio':>9} "
          f"{'worst gap ms':>12}  target")
    for s in shapes:
        for mode in ("lifecycle", "no-tasks"):
            r = out[s][mode]
            print(f"{s:8} {mode:9} {r['ratio']:6.3f} {r['paired']:6.3f} {r['p99_ratio']:9.3f} "
                  f"{fmt(r['max_gap'], '.1f', 12)}  "
                  + (">= 0.90 (informational)" if mode == "lifecycle" else "(today's cost)"))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as exc:
        print(f"asyncio_lifecycle: {exc}", file=sys.stderr)
        sys.exit(1)
