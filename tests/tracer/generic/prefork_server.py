#!/usr/bin/env python3
"""prefork_server.py -- a pre-fork asyncio server, as gunicorn or uvicorn
with workers run one: a master that forks N worker processes, each an
asyncio loop, for tests/tracer/test_group.py (record --children).

    prefork_server.py [--workers N]

The master prints "pid N", then each worker "worker PID port P" once it
serves: each worker listens on a port of its own, so that a client picks
which process does the work.  SIGUSR1 to the master forks one more worker
(a worker started after the recording began); SIGTERM ends them all.  A
client sends a route and a newline; the answer is

    done ROUTE T0 T1 CPU PID

T0..T1 the handler's own CLOCK_MONOTONIC interval (ns) around the work,
CPU its thread CPU time, PID the worker that did it.

    route   work
    sleep   time.sleep(0.05) on the worker's loop thread (blocks its loop)
    good    await asyncio.sleep(0.05)                    (does not block)
"""
import asyncio
import os
import signal
import socket
import sys
import time


def sleep_work():
    t0, c0 = time.monotonic_ns(), time.thread_time_ns()
    time.sleep(0.05)
    return t0, time.monotonic_ns(), time.thread_time_ns() - c0


async def handle(reader, writer):
    route = (await reader.readline()).decode().strip()
    if route == "sleep":
        t0, t1, cpu = sleep_work()
    else:
        t0, c0 = time.monotonic_ns(), time.thread_time_ns()
        await asyncio.sleep(0.05)
        t1, cpu = time.monotonic_ns(), time.thread_time_ns() - c0
    writer.write(f"done {route} {t0} {t1} {cpu} {os.getpid()}\n".encode())
    await writer.drain()
    writer.close()


async def serve():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    server = await asyncio.start_server(handle, sock=s)
    # one write: the workers share the pipe, and print's text and newline
    # can be two writes, another worker's line between them
    os.write(1, f"worker {os.getpid()} port {s.getsockname()[1]}\n".encode())
    async with server:
        await server.serve_forever()


def fork_worker():
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        try:
            asyncio.run(serve())
        finally:
            os._exit(0)
    return pid


def main():
    n = int(sys.argv[sys.argv.index("--workers") + 1]) if "--workers" in sys.argv else 3
    print(f"pid {os.getpid()}", flush=True)
    workers = [fork_worker() for _ in range(n)]
    more = []
    signal.signal(signal.SIGUSR1, lambda *_: more.append(1))
    signal.signal(signal.SIGTERM, lambda *_: more.append(0))
    while True:
        signal.pause()
        while more:
            if more.pop(0) == 0:
                for w in workers:
                    os.kill(w, signal.SIGTERM)
                for w in workers:
                    os.waitpid(w, 0)
                return
            workers.append(fork_worker())


if __name__ == "__main__":
    main()
