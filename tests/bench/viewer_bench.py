#!/usr/bin/env python3
"""viewer_bench.py -- the viewer on a ~10M-event trace: time and memory.

    tests/bench/viewer_bench.py [--build DIR] [--trace FILE] [--rate R]

Records (needs root) trace_workload paced at R events/s for 10 s into a
trace of about 10 million events (or uses --trace FILE), then runs each
viewer command on it and prints wall time and peak memory (max RSS of the
child) next to the database size.  Bars from the viewer issue: info, tasks,
blocking and timeline within 2 s, under half the database size in memory.
A benchmark: it prints numbers, it does not pass or fail.
"""
import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

from tracer_bench import exit_on_sigterm  # the same helpers, one copy


def peak_rss(cmd):
    """(seconds, max RSS in bytes) of one run: measured in a fresh Python
    child, whose RUSAGE_CHILDREN maximum is then this command's alone."""
    code = ("import resource,subprocess,sys,time;t=time.monotonic();"
            "r=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL);"
            "print(time.monotonic()-t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss*1024,"
            " r.returncode)")
    out = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True)
    secs, rss, rc = out.stdout.split()
    if rc != "0":
        sys.exit(f"viewer_bench: {' '.join(cmd)} exited {rc}")
    return float(secs), int(rss)




def main():
    exit_on_sigterm()
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--trace")
    ap.add_argument("--rate", type=int, default=1000000)
    a = ap.parse_args()
    ls = os.path.abspath(os.path.join(a.build, "viewer", "loopscope"))
    # The recorded trace and the graph outputs go here; removed on
    # every exit, failures included.
    tmp = tempfile.mkdtemp(prefix="lsvbench-")
    try:
        return bench(a, ls, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench(a, ls, tmp):
    db = a.trace
    if not db:
        if os.geteuid() != 0:
            print("viewer_bench: recording needs root (or pass --trace FILE)")
            return 77
        wl = os.path.abspath(os.path.join(a.build, "tests", "bench", "trace_workload"))
        db = os.path.join(tmp, "big.db")
        t0 = time.monotonic()
        subprocess.run([ls, "record", "-q", "-o", db, "--", wl, "--tasks", "200", "--rate",
                        str(a.rate), "--seconds", "10"], check=True, stdout=subprocess.DEVNULL)
        print(f"recorded {db} in {time.monotonic() - t0:.1f} s "
              f"(10 s of workload, then indexes and post-processing)")
    con = sqlite3.connect(db)
    nev = con.execute("SELECT max(rowid) FROM events").fetchone()[0]
    ntasks = con.execute("SELECT count(*) FROM tasks").fetchone()[0]
    con.close()
    size = os.path.getsize(db)
    print(f"trace: {nev:,} events, {ntasks} tasks, {size / 2**20:.0f} MiB")
    print(f"{'command':44} {'wall s':>7} {'max RSS MiB':>12} {'RSS/db':>7}")
    cmds = [
        ["info", db],
        ["tasks", db],
        ["tasks", db, "--sort", "busy", "--limit", "10"],
        ["blocking", db],
        ["timeline", db],
        ["timeline", db, "--svg", os.devnull],
        ["lint", db],
        ["graph", db, "--kind", "tasks", "-o", os.path.join(tmp, "vb.dot")],
        ["graph", db, "--kind", "lifecycle", "-o", os.path.join(tmp, "vb.dot")],
        ["export", db, "-o", os.devnull],
    ]
    for c in cmds:
        secs, rss = peak_rss([ls, *c])
        name = " ".join(x if x != db else "TRACE" for x in c).replace(tmp, "TMP")[:44]
        print(f"{name:44} {secs:7.2f} {rss / 2**20:12.1f} {rss / size:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
