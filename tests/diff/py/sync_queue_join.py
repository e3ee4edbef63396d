"""Queue.join waits until every item put has been task_done, and wakes one
iteration after the last task_done; join with nothing unfinished returns at
once; task_done called too often is a ValueError."""
import asyncio
from common import say, run, outcome, ticker


async def worker(q, name):
    while True:
        item = await q.get()
        say(f"{name} got {item}")
        for _ in range(abs(item)):
            await asyncio.sleep(0)
        q.task_done()
        say(f"{name} done {item}")
        if item < 0:
            return 0


async def joiner(q, name):
    say(f"{name} joins")
    await q.join()
    say(f"{name} joined")
    return 0


async def main():
    q = asyncio.Queue()
    await q.join()
    say("main join on empty returned")
    for i in range(1, 4):
        q.put_nowait(i)
    j1 = asyncio.create_task(joiner(q, "j1"))
    j2 = asyncio.create_task(joiner(q, "j2"))
    w1 = asyncio.create_task(worker(q, "w1"))
    w2 = asyncio.create_task(worker(q, "w2"))
    say(f"j1 -> {await outcome(j1)}")
    say(f"j2 -> {await outcome(j2)}")
    q.put_nowait(-1)
    q.put_nowait(-2)
    j3 = asyncio.create_task(joiner(q, "j3"))
    await asyncio.sleep(0)
    say(f"main cancel j3 {j3.cancel()}")
    say(f"j3 -> {await outcome(j3)}")
    await q.join()
    say("main joined")
    say(f"w1 -> {await outcome(w1)}")
    say(f"w2 -> {await outcome(w2)}")
    try:
        q.task_done()
    except ValueError:
        say("task_done ValueError")

run(main)
