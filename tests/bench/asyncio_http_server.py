#!/usr/bin/env python3
"""asyncio_http_server.py -- a minimal asyncio HTTP/1.1 server for generic_overhead.py,
http_peers.py and asyncio_lifecycle.py.

    tests/bench/asyncio_http_server.py [--port P] [--task-per-request]

Standard library only: asyncio.start_server, one coroutine per connection
that reads a request head (up to the blank line; no bodies) and answers a
fixed keep-alive response ("hello\\n"), until the client closes.
--task-per-request answers each request in a task of its own
(asyncio.create_task, awaited by the connection's coroutine): a task made
and destroyed per request, the worst case for asyncio_lifecycle.py.  Prints
"pid P" and "port N" (N: the bound port; --port 0, the default, picks a free
one) on stdout, then serves on 127.0.0.1 until SIGTERM or SIGINT.

It is the kind of process loopscope's generic loop mode records: a plain
CPython asyncio loop (one thread waiting in epoll_wait) without libevl.
"""
import argparse
import asyncio
import functools
import os
import signal

BODY = b"hello\n"
RESPONSE = (b"HTTP/1.1 200 OK\r\n"
            b"Content-Type: text/plain\r\n"
            b"Content-Length: " + str(len(BODY)).encode() + b"\r\n"
            b"Connection: keep-alive\r\n"
            b"\r\n" + BODY)


async def answer(writer):
    writer.write(RESPONSE)
    await writer.drain()


async def handle(reader, writer, task_per_request=False):
    try:
        while True:
            try:
                await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                break
            if task_per_request:
                await asyncio.create_task(answer(writer))
            else:
                writer.write(RESPONSE)
                await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def main(port, task_per_request=False):
    server = await asyncio.start_server(
        functools.partial(handle, task_per_request=task_per_request), "127.0.0.1", port,
        backlog=1024)
    bound = server.sockets[0].getsockname()[1]
    print(f"pid {os.getpid()}\nport {bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--task-per-request", action="store_true",
                    help="answer each request in an asyncio task of its own")
    a = ap.parse_args()
    asyncio.run(main(a.port, a.task_per_request))
