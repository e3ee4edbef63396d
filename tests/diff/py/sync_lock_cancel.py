"""Lock and cancellation: a waiter cancelled while it waits is skipped by
release() and, when it runs, passes the wakeup on; a waiter woken by
release() and cancelled before it runs passes the lock on; an acquire on a
free lock whose waiters are all cancelled takes it at once."""
import asyncio
from common import say, run, outcome, ticker


async def waiter(lock, name):
    say(f"{name} wants")
    try:
        await lock.acquire()
    except asyncio.CancelledError:
        say(f"{name} cancelled locked {lock.locked()}")
        raise
    say(f"{name} got")
    await asyncio.sleep(0)
    lock.release()
    say(f"{name} released")
    return 0


async def main():
    lock = asyncio.Lock()
    # 1: a is cancelled while it waits, then the lock is released.
    await lock.acquire()
    a = asyncio.create_task(waiter(lock, "a"))
    b = asyncio.create_task(waiter(lock, "b"))
    await asyncio.sleep(0)
    say(f"main cancel a {a.cancel()}")
    lock.release()
    say("main released")
    tick = asyncio.create_task(ticker(6))
    say(f"a -> {await outcome(a)}")
    say(f"b -> {await outcome(b)}")
    await tick
    # 2: d is woken by the release, then cancelled before it runs.
    await lock.acquire()
    d = asyncio.create_task(waiter(lock, "d"))
    e = asyncio.create_task(waiter(lock, "e"))
    await asyncio.sleep(0)
    lock.release()
    say(f"main released, cancel d {d.cancel()}")
    tick = asyncio.create_task(ticker(6))
    say(f"d -> {await outcome(d)}")
    say(f"e -> {await outcome(e)}")
    await tick
    # 3: every waiter cancelled and the lock free: acquire does not wait.
    await lock.acquire()
    x = asyncio.create_task(waiter(lock, "x"))
    await asyncio.sleep(0)
    say(f"main cancel x {x.cancel()}")
    lock.release()
    await lock.acquire()
    say(f"main took it at once locked {lock.locked()}")
    say(f"x -> {await outcome(x)}")
    lock.release()
    say(f"main end locked {lock.locked()}")

run(main)
