#!/usr/bin/env python3
"""py_server.py -- a stdlib asyncio line-protocol server with one blocking
bug per route, for tests/tracer/test_generic.py (the generic loop mode).

    py_server.py [--selector epoll|poll] [--seconds S] [--comm NAME]

Prints "pid N" and "port P", then serves on 127.0.0.1 until killed (or
for S seconds).  --comm: the process's name (prctl PR_SET_NAME, at most 15
bytes of anything).  A client sends a route and a newline; the answer is

    done ROUTE T0 T1 CPU TID

where T0..T1 is the handler's own CLOCK_MONOTONIC interval (ns) around
the work, CPU the thread CPU time (ns) the work used, and TID the thread
that did it: an independent measurement to compare the trace with.

    route     work
    sleep     time.sleep(0.05) on the loop thread       (off-CPU: blocks)
    cpu       30 ms of CPU on the loop thread            (on-CPU: blocks)
    good      await asyncio.sleep(0.05)                  (does not block)
    executor  time.sleep(0.2) in run_in_executor         (does not block)
    poll      poll() with no fd for 60 ms on the loop thread (off-CPU:
              blocks, as glibc's resolver polling its socket would)
    hold P    makes the file P.spinning, spins on the loop thread until the
              file P exists, then does sleep's work (its times answered)
    nap P     sleep's work, then as hold, spins until the file P exists
              (sleep's times answered); P.spinning holds the thread's count
              of context switches when its sleep returned
"""
import asyncio
import os
import resource
import select
import selectors
import sys
import threading
import time


def sleep_work():
    t0, c0 = time.monotonic_ns(), time.thread_time_ns()
    time.sleep(0.05)
    return t0, time.monotonic_ns(), time.thread_time_ns() - c0, threading.get_native_id()


def cpu_work():
    t0, c0 = time.monotonic_ns(), time.thread_time_ns()
    while time.thread_time_ns() - c0 < 30_000_000:
        pass
    return t0, time.monotonic_ns(), time.thread_time_ns() - c0, threading.get_native_id()


def poll_work():
    t0, c0 = time.monotonic_ns(), time.thread_time_ns()
    select.poll().poll(60)
    return t0, time.monotonic_ns(), time.thread_time_ns() - c0, threading.get_native_id()


def executor_work():
    t0, c0 = time.monotonic_ns(), time.thread_time_ns()
    time.sleep(0.2)
    return t0, time.monotonic_ns(), time.thread_time_ns() - c0, threading.get_native_id()


async def handle(reader, writer):
    line = (await reader.readline()).decode().strip()
    if line.startswith("hold "):
        path = line[5:]
        open(path + ".spinning", "w").close()
        while not os.path.exists(path):
            pass
        line, r = "hold", sleep_work()
    elif line.startswith("nap "):
        path, (line, r) = line[4:], ("nap", sleep_work())
        u = resource.getrusage(resource.RUSAGE_THREAD)
        with open(path + ".spinning", "w") as f:
            f.write(f"{u.ru_nvcsw + u.ru_nivcsw}\n")   # its switches since its sleep
        while not os.path.exists(path):
            pass
    elif line == "sleep":
        r = sleep_work()
    elif line == "cpu":
        r = cpu_work()
    elif line == "poll":
        r = poll_work()
    elif line == "good":
        t0, c0 = time.monotonic_ns(), time.thread_time_ns()
        await asyncio.sleep(0.05)
        r = (t0, time.monotonic_ns(), time.thread_time_ns() - c0, threading.get_native_id())
    elif line == "executor":
        r = await asyncio.get_running_loop().run_in_executor(None, executor_work)
    else:
        r = None
    if r is None:
        writer.write(f"unknown {line}\n".encode())
    else:
        writer.write(("done %s %d %d %d %d\n" % (line, *r)).encode())
    await writer.drain()
    writer.close()


async def main(seconds):
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(f"pid {threading.get_native_id()}")
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        if seconds:
            await asyncio.sleep(seconds)
        else:
            await server.serve_forever()


if __name__ == "__main__":
    args = sys.argv[1:]
    selector = args[args.index("--selector") + 1] if "--selector" in args else "epoll"
    seconds = float(args[args.index("--seconds") + 1]) if "--seconds" in args else 0
    if "--comm" in args:
        import ctypes
        ctypes.CDLL(None).prctl(15, args[args.index("--comm") + 1].encode()[:15], 0, 0, 0)
    sel = selectors.PollSelector() if selector == "poll" else selectors.EpollSelector()
    loop = asyncio.SelectorEventLoop(sel)
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(main(seconds))
    finally:
        loop.close()
