#!/usr/bin/env python3
"""bench_asyncio.py -- the CPython asyncio reference lines of run.sh.

The same scenarios as bench_spawn.c and bench_yield.c, written with asyncio,
printing RESULT lines in the format of bench.h (impl "python-asyncio"):

  spawn    create_task of N trivial coroutines, then run them all: ns/task
  yield    1000 tasks each awaiting asyncio.sleep(0) K times: ns/yield
  yield-2  the same with two tasks
  pingpong two tasks echoing 64-byte messages over a unix socketpair with
           loop.sock_recv / loop.sock_sendall: round trips per second (the
           model libevl follows: try the syscall, await readiness on EAGAIN)

Sizes are smaller than the C runs (CPython is ~50x slower); the results are
per task / per yield, so they compare.  See tests/bench/README.md.
"""
import argparse
import asyncio
import socket
import statistics
import time


def bench_spawn(n):
    ran = 0

    async def trivial():
        nonlocal ran
        ran += 1

    loop = asyncio.new_event_loop()
    try:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            loop.create_task(trivial())
        loop.call_soon(loop.stop)  # runs after every task's first step
        loop.run_forever()
        t1 = time.perf_counter_ns()
    finally:
        loop.close()
    assert ran == n, (ran, n)
    return (t1 - t0) / n


def bench_yield(tasks, yields):
    state = {"started": 0, "finished": 0, "t0": 0, "t1": 0}

    async def yielder():
        state["started"] += 1
        if state["started"] == tasks:
            state["t0"] = time.perf_counter_ns()
        for _ in range(yields):
            await asyncio.sleep(0)
        state["finished"] += 1
        if state["finished"] == 1:  # as bench_yield.c: before any task ends
            state["t1"] = time.perf_counter_ns()

    loop = asyncio.new_event_loop()
    try:
        ts = [loop.create_task(yielder()) for _ in range(tasks)]
        loop.run_until_complete(asyncio.gather(*ts))
    finally:
        loop.close()
    counted = tasks * (yields - 1)
    return (state["t1"] - state["t0"]) / counted


def bench_pingpong(rounds, msg=64):
    async def recv_full(loop, sock):
        buf = b""
        while len(buf) < msg:
            chunk = await loop.sock_recv(sock, msg - len(buf))
            assert chunk, "peer closed"
            buf += chunk
        return buf

    async def ping(loop, sock):
        data = bytes(msg)
        for _ in range(rounds):
            await loop.sock_sendall(sock, data)
            data = await recv_full(loop, sock)

    async def pong(loop, sock):
        for _ in range(rounds):
            await loop.sock_sendall(sock, await recv_full(loop, sock))

    async def main():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        a.setblocking(False)
        b.setblocking(False)
        try:
            t0 = time.perf_counter_ns()
            await asyncio.gather(pong(loop, b), ping(loop, a))
            return time.perf_counter_ns() - t0
        finally:
            a.close()
            b.close()

    return rounds * 1e9 / asyncio.run(main())


def report(bench, unit, samples):
    s = sorted(samples, reverse=unit.endswith("/s"))
    print(f"RESULT {bench} python-asyncio {unit} best={s[0]:.5g} "
          f"median={statistics.median(s):.5g} repeats={len(s)}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench", choices=["spawn", "yield", "yield-2", "pingpong", "all"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=None)
    a = ap.parse_args()
    repeats = a.repeats or (2 if a.quick else 7)
    todo = ["spawn", "yield", "yield-2", "pingpong"] if a.bench == "all" else [a.bench]
    for b in todo:
        if b == "spawn":
            n = 1000 if a.quick else 100000
            report(b, "ns/task", [bench_spawn(n) for _ in range(repeats)])
        elif b == "yield":
            k = 10 if a.quick else 100
            report(b, "ns/yield", [bench_yield(1000, k) for _ in range(repeats)])
        elif b == "yield-2":
            k = 1000 if a.quick else 100000
            report(b, "ns/yield", [bench_yield(2, k) for _ in range(repeats)])
        else:
            n = 500 if a.quick else 20000
            report(b, "rt/s", [bench_pingpong(n) for _ in range(repeats)])


if __name__ == "__main__":
    main()
