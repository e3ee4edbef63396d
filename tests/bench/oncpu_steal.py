#!/usr/bin/env python3
"""On-CPU episodes of a loop whose steps never reach the threshold.

A generic epoll loop (CPython, selectors: tests/tracer/generic/cpu_steps.py)
whose every step burns WORK ms of its own CPU time (time.thread_time: the
kernel's count for the thread, which leaves out time the hypervisor stole
from the CPU) and then waits 20 ms.  Recorded with `--block-threshold` THRESHOLD > WORK, no step is an
on-CPU episode; every one the trace holds is false.  Beside CPU hogs and
an I/O hog (--hogs, as tests/run.sh --stress) the steps are preempted,
which the recorder counts off the CPU at the switches, and on a virtual
machine the host steals the CPU in the middle of some of them, which it
counts only from the run queue's clocks (tracer/record.bpf.h, cpu_unrun).

Prints, of the steps the target made while the recorder was attached, how
many there were, how many took the threshold or more in wall time (the
candidates) and in CPU time (the true episodes; with --work-ms above the
threshold, every step), then the on-CPU episodes recorded: how many fall
in a step of that much CPU (true) or less (false); and the steal
/proc/stat counted on the machine meanwhile.

  tests/bench/oncpu_steal.py [--loopscope PATH] [--seconds S] [--hogs]
                             [--runs N]
"""
import argparse
import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "tracer"))
from lstest import cpu_hogs  # noqa: E402  (the hogs of the tests)

TARGET = os.path.join(ROOT, "tests", "tracer", "generic", "cpu_steps.py")


def steal_ticks():
    with open("/proc/stat") as f:
        return int(f.readline().split()[8])


def one_run(a, d):
    out = os.path.join(d, "steps.txt")
    db = os.path.join(d, "t.db")
    tgt = subprocess.Popen([sys.executable, TARGET, str(a.work_ms),
                            str(a.seconds + 4), out], stdout=subprocess.PIPE, text=True)
    try:
        tgt.stdout.readline()
        s0, t0 = steal_ticks(), time.monotonic()
        rec = subprocess.run([a.loopscope, "record", "-p", str(tgt.pid), "-t",
                              str(a.threshold_ms), "-d", str(a.seconds), "-o", db, "-f"],
                             capture_output=True, text=True)
        s1, t1 = steal_ticks(), time.monotonic()
        if rec.returncode:
            sys.exit(f"oncpu_steal: record failed: {rec.stderr.strip()}")
        tgt.wait(timeout=60)
    finally:
        if tgt.poll() is None:
            tgt.kill()
    thr = a.threshold_ms * 10**6
    con = sqlite3.connect(db)
    eps = con.execute("SELECT start_ns, dur_ns FROM blocking WHERE kind = 2").fetchall()
    m = dict(con.execute("SELECT key, value FROM meta"))
    con.close()
    # the steps made while the recorder was attached: from its start for
    # --seconds (the trace's end_ns comes later, once it is stored)
    t_start = int(m["start_ns"])
    t_end = t_start + int(a.seconds * 1e9)
    steps = [s for s in (tuple(map(int, line.split())) for line in open(out))
             if t_start <= s[0] and s[1] <= t_end]
    false = found = 0
    for start, _ in eps:
        # the recorder's step starts at the select's return, a little
        # before the target's own stamp
        cpu = [c for s, e, c, _ in steps if s - 2 * 10**6 <= start <= e]
        if not cpu or max(cpu) < thr:
            false += 1
        else:
            found += 1
    ticks = os.sysconf("SC_CLK_TCK")
    return dict(steps=len(steps), over_wall=sum(1 for s, e, _, _ in steps if e - s >= thr),
                over_cpu=sum(1 for _, _, c, _ in steps if c >= thr), episodes=len(eps),
                found=found, false=false, steal_s=(s1 - s0) / ticks, span_s=t1 - t0)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loopscope", default=os.path.join(ROOT, "build", "viewer", "loopscope"))
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--work-ms", type=float, default=6)
    p.add_argument("--threshold-ms", type=int, default=10)
    p.add_argument("--hogs", action="store_true",
                   help="a CPU hog per CPU and an I/O hog, as tests/run.sh --stress")
    a = p.parse_args()
    d = tempfile.mkdtemp(prefix="oncpu_steal.")
    try:
        with cpu_hogs(per_cpu=1, io_dir=d) if a.hogs else contextlib.nullcontext():
            print(f"loopscope: {a.loopscope}")
            print(f"steps of {a.work_ms} ms CPU, threshold {a.threshold_ms} ms, {a.seconds} s a "
                  f"run, {'a CPU hog per CPU and an I/O hog' if a.hogs else 'no hogs'}")
            print("run  steps  wall>=thr  cpu>=thr  on-CPU episodes  true  false  "
                  "steal (s, % of CPUs)")
            for i in range(a.runs):
                r = one_run(a, d)
                pct = 100 * r["steal_s"] / (r["span_s"] * os.cpu_count())
                print(f"{i + 1:>3}  {r['steps']:>5}  {r['over_wall']:>9}  {r['over_cpu']:>8}  "
                      f"{r['episodes']:>15}  {r['found']:>4}  {r['false']:>5}  "
                      f"{r['steal_s']:.1f} ({pct:.1f} %)", flush=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)

if __name__ == "__main__":
    main()
