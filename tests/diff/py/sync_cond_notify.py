"""Condition: notify(n) wakes the first n waiters, which then re-acquire the
lock in turn once the notifier releases it; notify_all wakes the rest;
wait_for re-checks its predicate after every wakeup; notify without the
lock is a RuntimeError."""
import asyncio
from common import say, run, outcome, ticker


async def waiter(cond, name):
    async with cond:
        say(f"{name} waits")
        r = await cond.wait()
        say(f"{name} woke {r} locked {cond.locked()}")
        await asyncio.sleep(0)
        say(f"{name} leaves")
    say(f"{name} out")
    return 0


async def pred_waiter(cond, box):
    async with cond:
        say("p waits for 2")
        r = await cond.wait_for(lambda: box[0] >= 2 and box[0])
        say(f"p woke with {r}")
    return 0


async def main():
    cond = asyncio.Condition()
    names = ("a", "b", "c", "d")
    ts = [asyncio.create_task(waiter(cond, n)) for n in names]
    await asyncio.sleep(0)
    async with cond:
        say("main notify 2")
        cond.notify(2)
        await asyncio.sleep(0)
        say("main still holds")
    tick = asyncio.create_task(ticker(8))
    say(f"a -> {await outcome(ts[0])}")
    say(f"b -> {await outcome(ts[1])}")
    await tick
    async with cond:
        say("main notify_all")
        cond.notify_all()
    for name, t in zip(names[2:], ts[2:]):
        say(f"{name} -> {await outcome(t)}")
    try:
        cond.notify()
    except RuntimeError:
        say("notify unlocked RuntimeError")
    # a second notify(1) skips the waiter the first one woke
    names = ("e", "f", "g")
    ts = [asyncio.create_task(waiter(cond, n)) for n in names]
    await asyncio.sleep(0)
    async with cond:
        cond.notify(1)
        cond.notify(1)
        say("main notified 1 twice")
    say(f"e -> {await outcome(ts[0])}")
    say(f"f -> {await outcome(ts[1])}")
    async with cond:
        say("main notify_all woke g")
        cond.notify_all()
    say(f"g -> {await outcome(ts[2])}")
    box = [0]
    p = asyncio.create_task(pred_waiter(cond, box))
    await asyncio.sleep(0)
    for i in (1, 2):
        async with cond:
            box[0] = i
            say(f"main value {i}")
            cond.notify()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    say(f"p -> {await outcome(p)}")

run(main)
