"""cpu_steps.py -- a loop of steps of known CPU time (test_generic.py's
cpu_steps, tests/bench/oncpu_steal.py).

    cpu_steps.py WORK_MS SECONDS OUT [HEAVY_MS EVERY]

A selectors loop (epoll) that waits 20 ms for nothing, then, from the
wait's return, burns WORK_MS of its own CPU time (time.thread_time: the
kernel's count for the thread, which leaves out time it was switched out
and time the hypervisor stole from the CPU), or HEAVY_MS every EVERY-th
step; again, for SECONDS.  Prints "ready" first; at the end writes each
step to OUT as "START END CPU STEAL" (ns; START and END on
CLOCK_MONOTONIC, the trace's clock; CPU the thread's over the step;
STEAL the machine's steal time over it, all CPUs, from /proc/stat's
ticks).
"""
import os
import selectors
import socket
import sys
import time

TICK = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def steal():
    with open("/proc/stat") as f:
        return int(f.readline().split()[8]) * TICK


work = float(sys.argv[1]) / 1e3
end = time.monotonic() + float(sys.argv[2])
heavy = float(sys.argv[4]) / 1e3 if len(sys.argv) > 5 else work
every = int(sys.argv[5]) if len(sys.argv) > 5 else 0
sel = selectors.DefaultSelector()
a, b = socket.socketpair()
sel.register(a, selectors.EVENT_READ)
print("ready", flush=True)
steps = []
while time.monotonic() < end:
    sel.select(0.02)
    burn = heavy if every and len(steps) % every == every - 1 else work
    t0, c0 = time.monotonic_ns(), time.thread_time()
    s0 = steal()
    while time.thread_time() - c0 < burn:
        pass
    s1 = steal()
    c1, t1 = time.thread_time(), time.monotonic_ns()
    steps.append((t0, t1, int((c1 - c0) * 1e9), s1 - s0))
with open(sys.argv[3], "w") as f:
    for s in steps:
        print(*s, file=f)
