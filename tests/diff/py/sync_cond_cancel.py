"""Condition.wait cancelled: the lock is re-acquired before the
cancellation is seen, whether the task was waiting for a notification,
notified and cancelled before it ran, or cancelled again while it waited
to re-acquire."""
import asyncio
from common import say, run, outcome, ticker


async def waiter(cond, name):
    await cond.acquire()
    say(f"{name} waits")
    try:
        r = await cond.wait()
        say(f"{name} woke {r}")
    except asyncio.CancelledError:
        say(f"{name} cancelled locked {cond.locked()}")
        cond.release()
        raise
    cond.release()
    say(f"{name} released")
    return 0


async def main():
    cond = asyncio.Condition()
    # 1: cancelled while waiting for a notification; the lock is busy.
    a = asyncio.create_task(waiter(cond, "a"))
    await asyncio.sleep(0)
    await cond.acquire()
    say(f"main holds, cancel a {a.cancel()}")
    tick = asyncio.create_task(ticker(4))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    say("main releases")
    cond.release()
    say(f"a -> {await outcome(a)}")
    await tick
    # 2: notified and cancelled in the same iteration.
    b = asyncio.create_task(waiter(cond, "b"))
    c = asyncio.create_task(waiter(cond, "c"))
    await asyncio.sleep(0)
    async with cond:
        cond.notify()
        say(f"main notified, cancel b {b.cancel()}")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        say("main releases")
    say(f"b -> {await outcome(b)}")
    # 3: notified, then cancelled while it waits to re-acquire the lock.
    await cond.acquire()
    cond.notify()
    say("main notified c")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    say(f"main cancel c {c.cancel()}")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    say("main releases")
    cond.release()
    say(f"c -> {await outcome(c)}")
    say(f"main end locked {cond.locked()}")

run(main)
