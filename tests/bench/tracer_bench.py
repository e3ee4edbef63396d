#!/usr/bin/env python3
"""tracer_bench.py -- what tracing costs the traced loop, and ingest speed.

    tests/bench/tracer_bench.py [--build DIR] [--repeat N] [--quick]

Needs root (BPF).  Prints two tables:

1. Overhead: trace_workload (100 tasks yielding; each yield is 3 lifecycle
   events: suspend, wake, run) untraced, under `loopscope record` (batched,
   with and without blocking detection), under `loopscope record --no-batch`
   (one uprobe hit per event) and under bpftrace counting the same three
   probes.  ns per yield (min and median of N runs) and the added cost per
   recorded event: (traced - untraced) / 3.
2. Ingest: trace_workload paced at a given event rate for 10 s under
   `loopscope record`: events stored per second and events dropped.

A benchmark, not a test: it prints numbers, it does not pass or fail.
"""
import argparse
import os
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lstrace  # noqa: E402  (tests/lstrace.py: events needs loopscope's SQLite extension)

EVENTS_PER_YIELD = 3


def run(cmd, timeout=600):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    m = re.search(r"cpu_ns_per_yield ([0-9.]+)", p.stdout + p.stderr)
    if p.returncode != 0 or not m:
        sys.exit(f"tracer_bench: {' '.join(cmd)} failed ({p.returncode}): {p.stderr[-500:]}")
    return float(m.group(1))


def dropped(meta):
    """What a trace lost: ring-buffer messages the kernel dropped plus events
    the target says it dropped (meta dropped_messages + dropped_events_claimed;
    older traces have one dropped_events) plus the records its loops dropped
    while the recorder held every buffer they lend (loop_lost_records_claimed).
    An error when none is there, so that a schema change cannot read as
    "nothing dropped"."""
    keys = [k for k in ("dropped_messages", "dropped_events_claimed", "dropped_events",
                        "loop_lost_records_claimed") if k in meta]
    if not keys:
        raise RuntimeError(f"the trace's meta table has no dropped_* counts: {sorted(meta)}")
    return sum(int(meta[k]) for k in keys)

def exit_on_sigterm():
    """SIGTERM (a timeout, kill) ends Python without unwinding: turn it into
    SystemExit so the finally blocks stop the children and remove the
    temporary files."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def main():
    exit_on_sigterm()
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("tracer_bench: needs root (BPF)")
        return 77
    ls = os.path.abspath(os.path.join(a.build, "viewer", "loopscope"))
    wl = os.path.abspath(os.path.join(a.build, "tests", "bench", "trace_workload"))
    yields = "20000" if a.quick else "2000000"
    repeat = 1 if a.quick else a.repeat
    tmp = tempfile.mkdtemp(prefix="lsbench-")
    try:
        return bench(ls, wl, yields, repeat, a.quick, tmp)
    finally:
        # Also when a run fails (sys.exit in run()): no trace is left behind.
        shutil.rmtree(tmp, ignore_errors=True)


def bench(ls, wl, yields, repeat, quick, tmp):
    work = [wl, "--tasks", "100", "--yields", yields]

    def loopscope(*opts):
        db = os.path.join(tmp, "t.db")
        if os.path.exists(db):
            os.unlink(db)
        return [ls, "record", "-q", "-o", db, *opts, "--", *work]

    bt = shutil.which("bpftrace")
    probes = " ".join(f"usdt:{wl}:evl:{p} {{ @{p} = count(); }}"
                      for p in ("task_run", "task_suspend", "task_wake"))
    modes = [
        ("untraced", lambda: work),
        ("loopscope (batched, blocking detection on)", lambda: loopscope()),
        ("loopscope (batched, --no-blocking)", lambda: loopscope("--no-blocking")),
        ("loopscope --no-batch (uprobe per event)", lambda: loopscope("--no-batch", "--no-blocking")),
    ]
    if bt:
        modes.append(("bpftrace, same 3 probes (uprobe per event)",
                      lambda: [bt, "-q", "-e", probes, "-c", " ".join(work)]))
    results = {name: [] for name, _ in modes}
    for _ in range(repeat):                 # interleave modes against drift
        for name, cmd in modes:
            results[name].append(run(cmd()))
    base = min(results["untraced"])
    print(f"tracer overhead: {yields} yields of 100 tasks, {EVENTS_PER_YIELD} events per "
          f"yield, {repeat} runs (min / median)")
    print("CPU time of the traced process (includes the uprobe traps and BPF programs run on")
    print("its thread; excludes the recorder, which runs on another core)")
    print(f"{'mode':46} {'ns/yield min':>12} {'median':>8} {'+ns/event':>10}")
    for name, _ in modes:
        v = results[name]
        extra = (min(v) - base) / EVENTS_PER_YIELD
        print(f"{name:46} {min(v):12.1f} {statistics.median(v):8.1f} "
              f"{'' if name == 'untraced' else f'{extra:10.1f}'}")

    print()
    seconds = "1" if quick else "10"
    print(f"ingest: paced workload for {seconds} s under loopscope record (batched)")
    print(f"{'target events/s':>16} {'stored events/s':>16} {'dropped':>10}")
    for rate in ([200000] if quick else [300000, 600000, 1000000]):
        db = os.path.join(tmp, "ingest.db")
        if os.path.exists(db):
            os.unlink(db)
        p = subprocess.run([ls, "record", "-q", "-o", db, "--", wl, "--tasks", "50", "--rate",
                            str(rate), "--seconds", seconds], capture_output=True, text=True,
                           timeout=600)
        if p.returncode != 0 or not os.path.exists(db):
            sys.exit(f"tracer_bench: recording at {rate} events/s failed ({p.returncode}): "
                     f"{p.stderr[-500:]}")
        con = sqlite3.connect(db)
        n = lstrace.event_count(con)
        lost = dropped(dict(con.execute("SELECT key, value FROM meta")))
        con.close()
        print(f"{rate:16d} {n / float(seconds):16.0f} {lost:10d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
