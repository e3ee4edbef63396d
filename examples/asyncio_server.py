#!/usr/bin/env python3
"""asyncio_server.py -- a plain CPython asyncio HTTP server with the classic bugs,
for loopscope's generic loop mode (no libevl, no changes to the program).

    python3 examples/asyncio_server.py [--port N]

Prints "pid P" and "port N", then serves HTTP/1.1 (keep-alive) on 127.0.0.1:

    /          a short answer (the well-behaved route)
    /report    builds a "report": time.sleep(0.05) inside the coroutine,
               the blocking call that stalls every other connection
    /checksum  30 ms of CPU work in the coroutine (same effect, on-CPU)
    /offload   the same sleep in the default executor (a worker thread):
               the loop stays free, nothing to report
    /transfer  starts two tasks, transfer-a and transfer-b, that take two
               locks in opposite orders: they deadlock, for good
    /leak      starts a task that awaits a future nobody will complete and
               keeps no reference to it: the next garbage collection
               destroys it pending ("Task was destroyed but it is pending!")

Each connection is served by its own task, named "conn-N".
"""
import argparse
import asyncio
import gc
import os
import time
import zlib


def build_report():
    time.sleep(0.05)            # blocks the loop: every connection waits
    return b"report ready\n"


def checksum():
    data = bytes(range(256)) * 64
    end = time.thread_time() + 0.03
    crc = 0
    while time.thread_time() < end:
        crc = zlib.crc32(data, crc)
    return b"%08x\n" % crc


ACCOUNTS = (asyncio.Lock(), asyncio.Lock())


TASKS = set()                       # the transfers: kept, so never collected


async def transfer(first, second):
    async with first:
        await asyncio.sleep(0.01)   # both take their first lock
        async with second:          # BUG: opposite orders, a deadlock
            pass


async def wait_forever():
    await asyncio.get_running_loop().create_future()   # BUG: nothing completes it


async def route(path):
    if path == b"/transfer":
        a, b = ACCOUNTS
        loop = asyncio.get_running_loop()
        TASKS.add(loop.create_task(transfer(a, b), name="transfer-a"))
        TASKS.add(loop.create_task(transfer(b, a), name="transfer-b"))
        return b"transferring\n"
    if path == b"/leak":
        loop = asyncio.get_running_loop()
        loop.create_task(wait_forever(), name="forgotten")
        loop.call_later(0.05, gc.collect)   # (a busy server collects soon anyway)
        return b"leaked\n"
    if path == b"/report":
        return build_report()
    if path == b"/checksum":
        return checksum()
    if path == b"/offload":
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, build_report)
    return b"hello\n"


async def serve(reader, writer):
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            path = line.split(b" ")[1] if line.count(b" ") >= 2 else b"/"
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            body = await route(path)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def main(port):
    count = 0

    def on_connect(reader, writer):
        nonlocal count
        count += 1
        asyncio.get_running_loop().create_task(serve(reader, writer), name=f"conn-{count}")

    server = await asyncio.start_server(on_connect, "127.0.0.1", port)
    print(f"pid {os.getpid()}", flush=True)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    try:
        asyncio.run(main(ap.parse_args().port))
    except KeyboardInterrupt:
        pass
