"""Event: set() wakes every waiter in wait order, one iteration later; a
waiter woken and then cleared still returns True; wait() on a set event
returns at once; a cancelled waiter leaves the others alone."""
import asyncio
from common import say, run, outcome, ticker


async def waiter(ev, name):
    say(f"{name} waits")
    r = await ev.wait()
    say(f"{name} woke {r} is_set {ev.is_set()}")
    return 0


async def main():
    ev = asyncio.Event()
    say(f"main is_set {ev.is_set()}")
    ts = [asyncio.create_task(waiter(ev, n)) for n in ("a", "b", "c")]
    await asyncio.sleep(0)
    ev.set()
    say(f"main set is_set {ev.is_set()}")
    ev.clear()
    say(f"main cleared is_set {ev.is_set()}")
    d = asyncio.create_task(waiter(ev, "d"))
    tick = asyncio.create_task(ticker(4))
    for name, t in zip(("a", "b", "c"), ts):
        say(f"{name} -> {await outcome(t)}")
    await tick
    ev.set()
    ev.set()
    say("main set twice")
    say(f"d -> {await outcome(d)}")
    say(f"main wait {await ev.wait()}")
    ev.clear()
    e = asyncio.create_task(waiter(ev, "e"))
    f = asyncio.create_task(waiter(ev, "f"))
    await asyncio.sleep(0)
    say(f"main cancel e {e.cancel()}")
    ev.set()
    say(f"e -> {await outcome(e)}")
    say(f"f -> {await outcome(f)}")

run(main)
