"""Lock: waiters acquire in FIFO order; a release wakes the first waiter,
which runs one iteration later; an acquire made while the lock is free but
promised to a woken waiter queues behind the others (no barging)."""
import asyncio
from common import say, run, outcome, ticker


async def worker(lock, name):
    say(f"{name} wants locked {lock.locked()}")
    await lock.acquire()
    say(f"{name} got")
    await asyncio.sleep(0)
    say(f"{name} releases")
    lock.release()
    return 0


async def main():
    lock = asyncio.Lock()
    await lock.acquire()
    say(f"main locked {lock.locked()}")
    ts = [asyncio.create_task(worker(lock, n)) for n in ("a", "b", "c")]
    await asyncio.sleep(0)
    lock.release()
    say(f"main released locked {lock.locked()}")
    tick = asyncio.create_task(ticker(10))
    await lock.acquire()
    say(f"main got again locked {lock.locked()}")
    lock.release()
    for name, t in zip(("a", "b", "c"), ts):
        say(f"{name} -> {await outcome(t)}")
    await tick
    async with lock:
        say(f"main with locked {lock.locked()}")
    say(f"main end locked {lock.locked()}")

run(main)
