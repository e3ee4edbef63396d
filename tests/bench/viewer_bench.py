#!/usr/bin/env python3
"""viewer_bench.py -- the viewer on a >= 10M-event trace: time and memory,
two builds side by side.

    tests/bench/viewer_bench.py [--build DIR] [--before-build DIR]
                                [--trace FILE] [--keep FILE]
                                [--rate R] [--seconds S] [--ringbuf-kb N]
                                [--repeat N] [--timeout S]

Records (needs root) trace_workload (200 tasks) paced at R events/s for S
seconds with a ring buffer of N KiB (defaults 700000, 12 and 1048576: about
12 million events and no ring-buffer drops), or uses --trace FILE.  The
recorder is the --before-build one when that is given (the old viewer may
refuse a newer schema; the new one reads old traces), else --build's; the
recording build needs trace_workload (configure it with LOOPSCOPE_BENCH=ON).
--keep FILE keeps the recorded trace for later runs with --trace FILE.

Each viewer gets its own copy of the trace: the current viewer completes an
old or cut-short trace (its derived tables) on first open, and that write
would otherwise be charged to the other viewer or to a later command.  The
first open, an `info` run, is a row of its own, then every command runs on
each copy, the before build first.  Each cell is wall time and peak RSS of
the command (wait4's ru_maxrss: the largest of the viewer and what it ran,
e.g. Graphviz's dot for an .svg graph); with --repeat N the fastest of N runs
and the largest RSS.  Commands a build does not have (`diff`, `export
--format chrome-json`) show '-'; a failing one shows its exit status.

The bars are the viewer issue's: info, tasks, blocking, timeline, lint and
every graph kind within 2 s; export at >= 3 M events/s; peak RSS at most
half the size of the recorded database (every row).  A benchmark: it
prints numbers and whether each bar is met, it does not pass or fail.
"""
import argparse
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

from tracer_bench import dropped, exit_on_sigterm  # the same helpers, one copy
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lstrace  # noqa: E402  (tests/lstrace.py: events needs loopscope's SQLite extension)

TIME_BAR = 2.0          # seconds, the interactive commands
EXPORT_BAR = 3e6        # events per second, export
RSS_BAR = 0.5           # peak RSS / database size


def measure(cmd, timeout, errfile):
    """(seconds, max RSS in bytes, exit status or 'timeout') of one run of
    cmd.  wait4 gives this child's own rusage (its largest RSS, or that of a
    child it waited for), nothing of this script's.  On timeout its process
    group (the viewer and e.g. Graphviz) is killed."""
    timed_out = []

    def kill(p):
        timed_out.append(True)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    with open(errfile, "wb") as err:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                             start_new_session=True)
        killer = threading.Timer(timeout, kill, (p,))
        killer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            killer.cancel()
        secs = time.monotonic() - t0
    p.returncode = rc = os.waitstatus_to_exitcode(status)
    return secs, ru.ru_maxrss * 1024, "timeout" if timed_out else rc


class Viewer:
    def __init__(self, label, build, db):
        self.label, self.db = label, db
        self.ls = os.path.abspath(os.path.join(build, "viewer", "loopscope"))
        if not os.access(self.ls, os.X_OK):
            sys.exit(f"viewer_bench: no {self.ls} (build the loopscope target)")
        top = subprocess.run([self.ls, "--help"], capture_output=True, text=True).stdout
        self.commands = {line.split()[0] for line in top.splitlines()
                         if line.startswith("  ") and line.split()}
        exp = subprocess.run([self.ls, "export", "--help"], capture_output=True, text=True)
        self.chrome_json = "chrome-json" in exp.stdout + exp.stderr

    def has(self, needs):
        if needs == "diff":
            return "diff" in self.commands
        if needs == "chrome-json":
            return self.chrome_json
        return True


def run_cell(v, args, a, tmp):
    """One command on one viewer: (secs, rss, rc, last stderr line) or None
    when the viewer does not have it."""
    cmd = [v.ls] + [v.db if x == "TRACE" else x.replace("OUT", v.label) for x in args]
    best = None
    errfile = os.path.join(tmp, "stderr.txt")
    for _ in range(a.repeat):
        secs, rss, rc = measure(cmd, a.timeout, errfile)
        if best is None:
            best = [secs, rss, rc]
        else:
            best = [min(best[0], secs), max(best[1], rss), rc or best[2]]
        if rc:
            break
    with open(errfile, "rb") as f:
        lines = f.read().decode(errors="replace").strip().splitlines()
    return (*best, lines[-1] if lines else "")


def record(a, build, tmp):
    ls = os.path.abspath(os.path.join(build, "viewer", "loopscope"))
    wl = os.path.abspath(os.path.join(build, "tests", "bench", "trace_workload"))
    if not os.access(wl, os.X_OK):
        sys.exit(f"viewer_bench: no {wl}: configure {build} with -DLOOPSCOPE_BENCH=ON and "
                 "build the trace_workload target (or pass --trace FILE)")
    db = os.path.join(tmp, "big.db")
    cmd = [ls, "record", "-q", "--ringbuf-kb", str(a.ringbuf_kb), "-o", db, "--", wl,
           "--tasks", "200", "--rate", str(a.rate), "--seconds", str(a.seconds)]
    print("record:", " ".join(cmd).replace(tmp, "TMP"))
    t0 = time.monotonic()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in r.stderr.splitlines():
        print("  " + line.replace(tmp, "TMP"))
    if r.returncode:
        sys.exit(f"viewer_bench: recording failed ({r.returncode})")
    print(f"recorded in {time.monotonic() - t0:.1f} s ({a.seconds:g} s of workload, "
          "then the ring buffer's backlog, indexes and post-processing)")
    return db


def trace_facts(db):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        nev = lstrace.event_count(con)
        ntasks = con.execute("SELECT count(*) FROM tasks").fetchone()[0]
        schema = con.execute("PRAGMA user_version").fetchone()[0]
        meta = dict(con.execute("SELECT key, value FROM meta"))
    finally:
        con.close()
    try:
        lost = dropped(meta)
    except RuntimeError:
        lost = None
    return nev, ntasks, schema, lost


# (row name, viewer arguments, time bar, export?, needs).  TRACE is the
# viewer's copy of the trace, OUT its label (before/after).
def command_rows(tmp):
    g = os.path.join(tmp, "OUT-graph.svg")
    return [
        ("info", ["info", "TRACE"], True, False, None),
        ("tasks", ["tasks", "TRACE"], True, False, None),
        ("tasks --sort busy --limit 10", ["tasks", "TRACE", "--sort", "busy", "--limit", "10"],
         True, False, None),
        ("blocking", ["blocking", "TRACE"], True, False, None),
        ("timeline", ["timeline", "TRACE"], True, False, None),
        ("timeline --svg /dev/null", ["timeline", "TRACE", "--svg", os.devnull], True, False, None),
        ("lint", ["lint", "TRACE"], True, False, None),
        ("graph --kind blocking -o x.svg", ["graph", "TRACE", "--kind", "blocking", "-o", g],
         True, False, None),
        ("graph --kind tasks -o x.svg", ["graph", "TRACE", "--kind", "tasks", "-o", g],
         True, False, None),
        ("graph --kind lifecycle -o x.svg", ["graph", "TRACE", "--kind", "lifecycle", "-o", g],
         True, False, None),
        ("export -o /dev/null", ["export", "TRACE", "-o", os.devnull], False, True, None),
        ("export --format chrome-json -o /dev/null",
         ["export", "TRACE", "--format", "chrome-json", "-o", os.devnull], False, True,
         "chrome-json"),
        ("diff TRACE TRACE", ["diff", "TRACE", "TRACE"], False, False, "diff"),
    ]


def verdict(cell, time_bar, export, nev, size):
    """'met', 'NOT MET (time, rss)', 'failed' or '' (not run)."""
    if cell is None:
        return ""
    secs, rss, rc, _ = cell
    if rc:
        return "timeout" if rc == "timeout" else "failed"
    missed = []
    if time_bar and secs > TIME_BAR:
        missed.append("time")
    if export and nev / secs < EXPORT_BAR:
        missed.append("rate")
    if rss > RSS_BAR * size:
        missed.append("rss")
    return "NOT MET (" + ", ".join(missed) + ")" if missed else "met"


def fmt_cell(cell, export, nev):
    """before/after columns: wall s, max RSS MiB, M events/s (export)."""
    if cell is None:
        return f"{'-':>8} {'-':>8} {'':>6}"
    secs, rss, rc, _ = cell
    if rc:
        return f"{rc if rc == 'timeout' else 'rc ' + str(rc):>8} {rss / 2**20:8.1f} {'':>6}"
    rate = f"{nev / secs / 1e6:6.2f}" if export else ""
    return f"{secs:8.2f} {rss / 2**20:8.1f} {rate:>6}"


def main():
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="the current build (default build)")
    ap.add_argument("--before-build", help="an older build to compare with; it records the trace")
    ap.add_argument("--trace", help="use this trace instead of recording one (not modified)")
    ap.add_argument("--keep", help="copy the recorded trace here (for later --trace runs)")
    ap.add_argument("--rate", type=int, default=700000, help="workload pacing (default 700000)")
    ap.add_argument("--seconds", type=float, default=12, help="workload duration (default 12)")
    ap.add_argument("--ringbuf-kb", type=int, default=1048576,
                    help="recorder ring buffer (default 1048576 = 1 GiB, no drops)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per cell, fastest kept (default 1)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per command (default 600)")
    a = ap.parse_args()
    # The recorded trace, the viewers' copies and the graph outputs go
    # here; removed on every exit, failures included.
    tmp = tempfile.mkdtemp(prefix="lsvbench-")
    try:
        return bench(a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench(a, tmp):
    src = a.trace
    if not src:
        if os.geteuid() != 0:
            print("viewer_bench: recording needs root (or pass --trace FILE)")
            return 77
        src = record(a, a.before_build or a.build, tmp)
        if a.keep:
            shutil.copyfile(src, a.keep)
            print(f"kept the trace as {a.keep}")
    nev, ntasks, schema, lost = trace_facts(src)
    size = os.path.getsize(src)
    drops = "unknown" if lost is None else f"{lost:,}"
    print(f"trace: {nev:,} events, {ntasks} tasks, {size / 2**20:.0f} MiB, schema {schema}, "
          f"dropped (messages + claimed events) {drops}")
    if nev < 10_000_000:
        print(f"note: fewer than the issue's 10 M events (raise --seconds or --rate)")

    viewers = []
    if a.before_build:
        viewers.append(("before", a.before_build))
    viewers.append(("after", a.build))
    vs = {}
    for label, build in viewers:
        db = os.path.join(tmp, f"{label}.db")
        shutil.copyfile(src, db)
        vs[label] = Viewer(label, build, db)
        print(f"{label}: {vs[label].ls}")
    before, after = vs.get("before"), vs["after"]

    rows = [("first open (completes the trace)", ["info", "TRACE"], False, False, None)]
    rows += command_rows(tmp)
    print()
    print(f"bars: {TIME_BAR:g} s (info tasks blocking timeline lint graph), "
          f"{EXPORT_BAR / 1e6:g} M events/s (export), peak RSS <= {RSS_BAR:g} x "
          f"{size / 2**20:.0f} MiB (every row)")
    head = f"{'command':40} | {'before s':>8} {'RSS MiB':>8} {'Mev/s':>6} | " \
           f"{'after s':>8} {'RSS MiB':>8} {'Mev/s':>6} {'RSS/db':>6} | {'before':20} | after"
    print(head)
    print("-" * len(head))
    notes, met, total = [], 0, 0
    for name, args, time_bar, export, needs in rows:
        cells = {}
        for label, v in vs.items():
            cells[label] = run_cell(v, args, a, tmp) if v.has(needs) else None
            c = cells[label]
            if c and c[2]:
                notes.append(f"{label} {name}: {c[2] if c[2] == 'timeout' else 'exit ' + str(c[2])}"
                             + (f": {c[3][:200]}" if c[3] else ""))
        b, f = cells.get("before"), cells["after"]
        ratio = f"{f[1] / size:6.2f}" if f else f"{'-':>6}"
        vb = verdict(b, time_bar, export, nev, size)
        vf = verdict(f, time_bar, export, nev, size)
        if f:
            total += 1
            met += vf == "met"
        print(f"{name:40} | {fmt_cell(b, export, nev)} | {fmt_cell(f, export, nev)} {ratio} | "
              f"{vb:20} | {vf}", flush=True)
        if name.startswith("first open"):
            grown = os.path.getsize(after.db) - size
            if grown:
                notes.append(f"after's first open grew its copy by {grown / 2**10:,.0f} KiB "
                             "(the derived tables)")
    print()
    print(f"after: {met} of {total} rows meet every bar that applies to them")
    for n in notes:
        print("note:", n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
