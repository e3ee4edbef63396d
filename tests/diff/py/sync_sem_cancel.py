"""Semaphore and cancellation: a waiter cancelled while it waits takes no
unit; a waiter handed a unit and cancelled before it runs gives the unit to
the next waiter; a bounded semaphore refuses a release above its initial
value and a negative initial value."""
import asyncio
from common import say, run, outcome, ticker


async def worker(sem, name):
    say(f"{name} wants")
    try:
        await sem.acquire()
    except asyncio.CancelledError:
        say(f"{name} cancelled value {sem._value}")
        raise
    say(f"{name} got value {sem._value}")
    await asyncio.sleep(0)
    sem.release()
    say(f"{name} released value {sem._value}")
    return 0


async def main():
    sem = asyncio.Semaphore(0)
    a = asyncio.create_task(worker(sem, "a"))
    b = asyncio.create_task(worker(sem, "b"))
    c = asyncio.create_task(worker(sem, "c"))
    await asyncio.sleep(0)
    say(f"main cancel a {a.cancel()}")
    sem.release()
    say(f"main released value {sem._value}")
    say(f"main cancel b {b.cancel()}")
    tick = asyncio.create_task(ticker(6))
    for name, t in (("a", a), ("b", b), ("c", c)):
        say(f"{name} -> {await outcome(t)}")
    await tick
    say(f"main value {sem._value} locked {sem.locked()}")
    bs = asyncio.BoundedSemaphore(2)
    await bs.acquire()
    bs.release()
    say(f"bounded released value {bs._value}")
    try:
        bs.release()
        say("bounded over-release accepted")
    except ValueError:
        say(f"bounded over-release ValueError value {bs._value}")
    try:
        asyncio.Semaphore(-1)
    except ValueError:
        say("negative ValueError")

run(main)
