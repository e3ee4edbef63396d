#!/usr/bin/env python3
"""burst_latency.py -- how a neighbour's bursts of CPU move a server's p99.

    tests/bench/burst_latency.py [--build DIR] [--rounds N] [--seconds S]

Runs examples/http_server under `wrk -t1 -c8` while another process on the
machine wakes every PERIOD and spins for BURST, the shape of the recorder's
work (it drained its ring buffer on a timer).  Each row keeps the same share
of one CPU (5 %) in bursts of different lengths, interleaved with runs with
no neighbour, for N rounds; it prints each run's requests/s and p99, then
the median p99 of each shape.  This is the measurement behind the
recorder's drains (tracer/engine.c: one batch per drain): on a loaded
2-CPU machine the server's p99 follows the longest burst, not the share.

A benchmark, not a test.  Needs wrk (exit 77 without it).
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

from http_overhead import free_port, wrk  # the same helpers, one copy

SHAPES = [None, (20.0, 1.0), (2.0, 0.1), (1.0, 0.05)]   # (period ms, burst ms)


def neighbour(period_ms, burst_ms):
    """A child that sleeps period, then spins for burst, until killed."""
    code = ("import time\n"
            f"p, b = {period_ms / 1e3}, {burst_ms / 1e3}\n"
            "while True:\n"
            "    time.sleep(p)\n"
            "    end = time.perf_counter() + b\n"
            "    while time.perf_counter() < end:\n"
            "        pass\n")
    return subprocess.Popen([sys.executable, "-c", code])


def name(shape):
    return "no neighbour" if shape is None else f"{shape[1]:g} ms every {shape[0]:g} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=4)
    a = ap.parse_args()
    if not shutil.which("wrk"):
        print("burst_latency: wrk is not installed (apt-get install wrk)")
        return 77
    server_bin = os.path.join(os.path.abspath(a.build), "examples", "http_server")
    port = free_port()
    server = subprocess.Popen([server_bin, "--port", str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    p99s = {name(s): [] for s in SHAPES}
    try:
        server.stdout.readline()          # "pid P"
        server.stdout.readline()          # "port P"
        url = f"http://127.0.0.1:{port}/"
        wrk(url, 1, 8, 1)                 # warm up
        print(f"burst_latency: {server_bin} GET / under wrk -t1 -c8 -d{a.seconds}s, "
              f"{a.rounds} rounds")
        print(f"{'round':>5} {'neighbour':24} {'req/s':>9} {'p99 ms':>7}")
        for r in range(a.rounds):
            for shape in SHAPES:
                n = neighbour(*shape) if shape else None
                try:
                    time.sleep(0.2)
                    rps, p99, _, _ = wrk(url, a.seconds, 8, 1)
                finally:
                    if n:
                        n.kill()
                        n.wait()
                p99s[name(shape)].append(p99)
                print(f"{r + 1:5d} {name(shape):24} {rps:9.0f} {p99 * 1e3:7.2f}", flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
    print()
    print("median p99 over the rounds:")
    for k, v in p99s.items():
        print(f"  {k:24} {statistics.median(v) * 1e3:6.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
