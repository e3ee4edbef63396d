"""Semaphore (3.11.7): acquires beyond the value wait in FIFO order; a
release hands the unit to the first waiter at once, so an acquire made
before that waiter runs waits behind it, even when more units are free; a
waiter that runs with units left wakes the next one."""
import asyncio
from common import say, run, outcome, ticker


async def worker(sem, name, hold):
    say(f"{name} wants locked {sem.locked()} value {sem._value}")
    await sem.acquire()
    say(f"{name} got value {sem._value}")
    for _ in range(hold):
        await asyncio.sleep(0)
    sem.release()
    say(f"{name} released value {sem._value}")
    return 0


async def main():
    sem = asyncio.Semaphore(2)
    specs = (("a", 3), ("b", 1), ("c", 2), ("d", 1), ("e", 1))
    ts = [asyncio.create_task(worker(sem, n, h)) for n, h in specs]
    tick = asyncio.create_task(ticker(12))
    for (name, _), t in zip(specs, ts):
        say(f"{name} -> {await outcome(t)}")
    await tick
    say(f"main value {sem._value}")
    await sem.acquire()
    await sem.acquire()
    say(f"main took both locked {sem.locked()}")
    ws = [asyncio.create_task(worker(sem, n, 1)) for n in ("f", "g", "h")]
    await asyncio.sleep(0)
    sem.release()
    sem.release()
    say(f"main released two value {sem._value} locked {sem.locked()}")
    late = asyncio.create_task(worker(sem, "late", 0))
    sem.release()
    sem.release()
    # one unit is free, but f, g and h are woken and have not run yet
    say(f"main released four value {sem._value} locked {sem.locked()}")
    await sem.acquire()
    say(f"main got again value {sem._value}")
    sem.release()
    for name, t in zip(("f", "g", "h", "late"), ws + [late]):
        say(f"{name} -> {await outcome(t)}")
    say(f"main end value {sem._value}")

run(main)
