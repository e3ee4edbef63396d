"""Queue.get and cancellation: a getter cancelled while it waits is popped
and skipped by put; a getter woken by put and cancelled before it runs
wakes the next getter, which takes the item."""
import asyncio
from common import say, run, outcome, ticker


async def getter(q, name):
    say(f"{name} gets")
    try:
        item = await q.get()
    except asyncio.CancelledError:
        say(f"{name} cancelled qsize {q.qsize()}")
        raise
    say(f"{name} got {item}")
    return item


async def main():
    q = asyncio.Queue()
    a = asyncio.create_task(getter(q, "a"))
    b = asyncio.create_task(getter(q, "b"))
    await asyncio.sleep(0)
    say(f"main cancel a {a.cancel()}")
    q.put_nowait(1)
    say("main put 1")
    tick = asyncio.create_task(ticker(3))
    say(f"a -> {await outcome(a)}")
    say(f"b -> {await outcome(b)}")
    await tick
    c = asyncio.create_task(getter(q, "c"))
    d = asyncio.create_task(getter(q, "d"))
    e = asyncio.create_task(getter(q, "e"))
    await asyncio.sleep(0)
    q.put_nowait(2)
    say(f"main put 2, cancel c {c.cancel()}")
    tick = asyncio.create_task(ticker(3))
    say(f"c -> {await outcome(c)}")
    say(f"d -> {await outcome(d)}")
    await tick
    q.put_nowait(3)
    say(f"e -> {await outcome(e)}")
    say(f"main qsize {q.qsize()}")

run(main)
