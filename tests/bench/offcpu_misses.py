#!/usr/bin/env python3
"""Off-CPU episodes the recorder misses: a generic loop's sleeps, each one
looked for in the trace.

A CPython selectors loop (epoll) that waits WAIT ms for nothing, then
calls time.sleep(SLEEP ms) (a blocking call: clock_nanosleep) in the
step, stamping each sleep's start and end (CLOCK_MONOTONIC, the trace's
clock); again, for the recording's length.  Recorded with each
--wait-hook asked for (`-t` THRESHOLD < SLEEP), every sleep made while
the recorder was attached is an off-CPU episode.  A sleep with no
off-CPU episode overlapping it is a miss: printed with the trace's
episodes and loop windows around it, and what the trace says it lost.
"Maybe short": the thread waited for a CPU (its schedstat) over the sleep
for more than SLEEP less THRESHOLD ms; if that wait came before the call,
the call slept under the threshold, and no episode is right.

Beside CPU hogs and an I/O hog (--hogs, as tests/run.sh --stress) the
stress passes once in a while lost one such episode in a test (a timer
callback's usleep, a request's time.sleep), with nothing dropped; this
makes thousands of sleeps a run, to find out how often and where.

  tests/bench/offcpu_misses.py [--loopscope PATH] [--seconds S] [--hogs]
                               [--hooks tracepoint,switch] [--runs N]
"""
import argparse
import contextlib
import os
import sqlite3
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "tracer"))
from lstest import cpu_hogs  # noqa: E402  (the hogs of the tests)

TARGET = r'''
import selectors, socket, sys, time
wait, nap, secs, out = float(sys.argv[1]) / 1e3, float(sys.argv[2]) / 1e3, float(sys.argv[3]), sys.argv[4]
sel = selectors.DefaultSelector()
a, b = socket.socketpair()
sel.register(a, selectors.EVENT_READ)
print("ready", flush=True)
end = time.monotonic() + secs
naps = []
stat = open("/proc/thread-self/schedstat", "rb", buffering=0)


def runq():
    stat.seek(0)
    return int(stat.read().split()[1])


while time.monotonic() < end:
    sel.select(wait)
    q0 = runq()
    t0 = time.monotonic_ns()
    time.sleep(nap)
    t1 = time.monotonic_ns()
    naps.append((t0, t1, runq() - q0))
with open(out, "w") as f:
    for x in naps:
        print(*x, file=f)
'''


def one_run(a, d, hook):
    out, db = os.path.join(d, "naps.txt"), os.path.join(d, f"{hook}.db")
    tgt = subprocess.Popen(["/usr/bin/python3.11", "-c", TARGET, str(a.wait_ms), str(a.sleep_ms),
                            str(a.seconds + 4), out], stdout=subprocess.PIPE, text=True)
    try:
        tgt.stdout.readline()
        rec = subprocess.run([a.loopscope, "record", "-q", "-p", str(tgt.pid), "-t",
                              str(a.threshold_ms), "-d", str(a.seconds), "--wait-hook", hook,
                              "-o", db, "-f"], capture_output=True, text=True)
        if rec.returncode:
            sys.exit(f"offcpu_misses: record failed: {rec.stderr.strip()}")
        tgt.wait(timeout=60)
    finally:
        if tgt.poll() is None:
            tgt.kill()
    con = sqlite3.connect(db)
    m = dict(con.execute("SELECT key, value FROM meta"))
    eps = con.execute("SELECT start_ns, dur_ns, syscall FROM blocking WHERE kind = 1 "
                      "ORDER BY start_ns").fetchall()
    t_start = int(m["start_ns"])
    t_end = t_start + int(a.seconds * 1e9)
    naps = [tuple(map(int, line.split())) for line in open(out)]
    # the sleeps made wholly while the recorder was attached (a margin of
    # 100 ms after its start: its threads found asleep at the attach)
    naps = [x for x in naps if t_start + 100_000_000 <= x[0] and x[1] <= t_end]
    misses = []
    for s, e, q in naps:
        if not any(es < e and es + ed > s for es, ed, _ in eps):
            misses.append((s, e, q))
    # a sleep whose thread waited for a CPU before its call (after the
    # deadline was taken) sleeps that much less in the call: under the
    # threshold, no episode (the wait for a CPU is no blocking)
    short = sum(1 for s, e, q in naps if q > a.sleep_ms * 1e6 - a.threshold_ms * 1e6)
    short_missed = sum(1 for s, e, q in misses if q > a.sleep_ms * 1e6 - a.threshold_ms * 1e6)
    print(f"{hook:<10} {len(naps):6} {len(eps):9} {len(misses):6} {short:6} {short_missed:13}  lost: "
          f"{m.get('lost_episodes')} episodes, {m.get('dropped_messages')} messages, "
          f"{m.get('missed_runs')} missed runs, {m.get('stale_waits')} stale waits, "
          f"{m.get('unseen_switches')} switches unseen", flush=True)
    for s, e, q in misses[:5]:
        near = [((es - s) / 1e6, ed / 1e6, sc) for es, ed, sc in eps
                if s - 200_000_000 <= es <= e + 200_000_000]
        wins = con.execute("SELECT start_ns, end_ns, iterations, wait_ns, busy_ns FROM loop_windows "
                           "WHERE end_ns >= ? AND start_ns <= ? ORDER BY start_ns",
                           (s - 100_000_000, e + 100_000_000)).fetchall()
        print(f"  miss: a sleep at +{(s - t_start) / 1e6:.1f} ms of {(e - s) / 1e6:.1f} ms, "
              f"{q / 1e6:.1f} ms of it waiting for a CPU; "
              f"episodes within 200 ms (ms from it, ms, syscall): "
              f"{[(round(x, 1), round(y, 1), z) for x, y, z in near]}; windows (ms from it, "
              f"ms long, iterations, wait ms, busy ms): "
              f"{[(round((w0 - s) / 1e6, 1), round((w1 - w0) / 1e6, 1), n, round(wt / 1e6, 1), round(b / 1e6, 1)) for w0, w1, n, wt, b in wins]}",
              flush=True)
    con.close()
    return len(naps), len(misses), short, short_missed


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loopscope", default=os.path.join(ROOT, "build", "viewer", "loopscope"))
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--wait-ms", type=float, default=5)
    p.add_argument("--sleep-ms", type=float, default=15)
    p.add_argument("--threshold-ms", type=int, default=10)
    p.add_argument("--hooks", default="tracepoint,switch")
    p.add_argument("--hogs", action="store_true",
                   help="a CPU hog per CPU and an I/O hog, as tests/run.sh --stress")
    a = p.parse_args()
    d = tempfile.mkdtemp(prefix="offcpu_misses.")
    total = {}
    with cpu_hogs(per_cpu=1, io_dir=d) if a.hogs else contextlib.nullcontext():
        print(f"loopscope: {a.loopscope}")
        print(f"waits of {a.wait_ms} ms, sleeps of {a.sleep_ms} ms, threshold {a.threshold_ms} ms, "
              f"{a.seconds} s a run, {'a CPU hog per CPU and an I/O hog' if a.hogs else 'no hogs'}")
        print("hook        sleeps  episodes  misses  maybe short  of them missed")
        for _ in range(a.runs):
            for hook in a.hooks.split(","):
                t = total.setdefault(hook, [0, 0, 0, 0])
                for i, x in enumerate(one_run(a, d, hook)):
                    t[i] += x
    for hook, (n, k, sh, shm) in total.items():
        print(f"total {hook}: {k} of {n} sleeps missed, {shm} of them maybe short "
              f"(of {sh} maybe short)")
    print(f"traces kept in {d}")


if __name__ == "__main__":
    main()
