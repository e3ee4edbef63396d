"""Queue with maxsize: put blocks while full and is woken by get in FIFO
order; a blocked putter cancelled puts nothing; a putter woken and
cancelled before it runs wakes the next putter."""
import asyncio
from common import say, run, outcome, ticker


async def producer(q, name, items):
    for i in items:
        say(f"{name} put {i} full {q.full()}")
        try:
            await q.put(i)
        except asyncio.CancelledError:
            say(f"{name} cancelled at {i} qsize {q.qsize()}")
            raise
        say(f"{name} put {i} done qsize {q.qsize()}")
    return 0


async def consumer(q, n):
    for _ in range(n):
        item = await q.get()
        say(f"got {item} qsize {q.qsize()}")
        await asyncio.sleep(0)
    return 0


async def main():
    q = asyncio.Queue(maxsize=2)
    p1 = asyncio.create_task(producer(q, "p1", (1, 2, 3, 4)))
    p2 = asyncio.create_task(producer(q, "p2", (10, 11)))
    tick = asyncio.create_task(ticker(3))
    await tick
    c = asyncio.create_task(consumer(q, 6))
    say(f"p1 -> {await outcome(p1)}")
    say(f"p2 -> {await outcome(p2)}")
    say(f"c -> {await outcome(c)}")
    # cancellation: x blocked, cancelled; y woken by a get, then cancelled
    q.put_nowait(100)
    q.put_nowait(101)
    x = asyncio.create_task(producer(q, "x", (200,)))
    y = asyncio.create_task(producer(q, "y", (300,)))
    z = asyncio.create_task(producer(q, "z", (400,)))
    await asyncio.sleep(0)
    say(f"main cancel x {x.cancel()}")
    await asyncio.sleep(0)
    say(f"main get {q.get_nowait()}")
    say(f"main cancel y {y.cancel()}")
    for name, t in (("x", x), ("y", y), ("z", z)):
        say(f"{name} -> {await outcome(t)}")
    items = []
    while not q.empty():
        items.append(q.get_nowait())
    say("left " + " ".join(str(i) for i in items))

run(main)
