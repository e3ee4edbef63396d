#!/usr/bin/env python3
"""fork_storm.py -- an epoll loop (selectors) that, at each SIGUSR1, forks
N children (default 1000) that each sleep 0.3 s and exit, reaps them, and
prints "forked N".  Prints "pid P" first.  For tests/tracer/test_group.py's
fork_storm case: a process group with --children under a storm of forks."""
import os
import selectors
import signal
import sys
import time

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
sel = selectors.EpollSelector()
r, w = os.pipe()
sel.register(r, selectors.EVENT_READ)
signal.signal(signal.SIGUSR1, lambda *_: os.write(w, b"x"))
print("pid", os.getpid(), flush=True)
while True:
    for _ in sel.select():
        os.read(r, 1)
        kids = []
        for _ in range(n):
            pid = os.fork()
            if pid == 0:
                time.sleep(0.3)
                os._exit(0)
            kids.append(pid)
        for p in kids:
            os.waitpid(p, 0)
        print("forked", n, flush=True)
