#!/usr/bin/env python3
"""Switches the scheduler's tracepoint does not show, seen by ftrace alone.

Runs the loop of tests/bench/offcpu_misses.py (a CPython selectors loop
that sleeps 15 ms in each step) for SECONDS with the kernel's own
sched_switch events on (tracefs, every CPU, no loopscope), then counts:

  - for each command name, the switches onto its threads and away from
    them (a thread that is switched onto a CPU is later switched away);
  - the loop thread's switches away with no switch onto a CPU since its
    previous one: it came back unseen.

  tests/bench/unseen_switches.py [--seconds S] [--hogs]

Needs root (tracefs at /sys/kernel/tracing).  Changes the tracing
instance's events, filter-free, and turns them off again at the end.
"""
import argparse
import collections
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "tracer"))
from lstest import cpu_hogs  # noqa: E402  (the hogs of the tests)
from offcpu_misses import TARGET  # noqa: E402

TR = "/sys/kernel/tracing"
LINE = re.compile(r"\[(\d+)\].*?\s(\d+)\.(\d+): sched_switch: prev_comm=(.*) prev_pid=(\d+) "
                  r"prev_prio=\d+ prev_state=(\S+) ==> next_comm=(.*) next_pid=(\d+) next_prio")


def put(name, text):
    with open(os.path.join(TR, name), "w") as f:
        f.write(text)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--hogs", action="store_true",
                   help="a CPU hog per CPU and an I/O hog, as tests/run.sh --stress")
    a = p.parse_args()
    d = tempfile.mkdtemp(prefix="unseen_switches.")
    with cpu_hogs(per_cpu=1, io_dir=d) if a.hogs else contextlib.nullcontext():
        tgt = subprocess.Popen(["/usr/bin/python3.11", "-c", TARGET, "5", "15",
                                str(a.seconds + 3), os.path.join(d, "naps.txt")],
                               stdout=subprocess.PIPE, text=True)
        tgt.stdout.readline()
        put("tracing_on", "0")
        put("trace", "")
        put("trace_clock", "mono")
        put("buffer_size_kb", "32768")
        put("events/sched/sched_switch/filter", "0")
        put("events/sched/sched_switch/enable", "1")
        put("tracing_on", "1")
        try:
            time.sleep(a.seconds)
        finally:
            put("tracing_on", "0")
            put("events/sched/sched_switch/enable", "0")
        with open(os.path.join(TR, "trace")) as f:
            text = f.read()
        put("trace", "")
        tgt.wait(timeout=60)
    onto, away = collections.Counter(), collections.Counter()
    state = None                      # the loop thread: "in" or "out"
    unseen = switches = 0
    for line in text.splitlines():
        m = LINE.search(line)
        if not m:
            continue
        prev_comm, prev_pid, next_comm, next_pid = m.group(4), int(m.group(5)), m.group(7), int(m.group(8))
        away[prev_comm] += 1
        onto[next_comm] += 1
        if prev_pid == tgt.pid:
            switches += 1
            if state == "out":
                unseen += 1
            state = "out"
        if next_pid == tgt.pid:
            state = "in"
    lost = re.search(r"entries-in-buffer/entries-written: (\d+)/(\d+)", text)
    print(f"{a.seconds} s, {'a CPU hog per CPU and an I/O hog' if a.hogs else 'no hogs'}; "
          f"ftrace entries in buffer/written: {lost.group(1)}/{lost.group(2)}" if lost else "")
    print("command names whose switches onto and away from their threads differ by over 10 %:")
    print("  onto   away  command")
    for comm in sorted(set(onto) | set(away), key=lambda c: -(onto[c] + away[c])):
        if abs(onto[comm] - away[comm]) > 0.1 * max(onto[comm], away[comm]) and \
                onto[comm] + away[comm] >= 10:
            print(f"{onto[comm]:6} {away[comm]:6}  {comm}")
    print(f"the loop thread: {switches} switches away, {unseen} of them with no switch onto a "
          "CPU since its previous one (back unseen)")


if __name__ == "__main__":
    main()
