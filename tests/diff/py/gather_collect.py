"""gather(return_exceptions=True) == EVL_GATHER_COLLECT: errors land in the results."""
import asyncio
from common import Boom, say, run, outcome, fmt


async def ok(name, ms, value):
    say(f"{name} start")
    await asyncio.sleep(ms / 1000)
    say(f"{name} done")
    return value


async def bad(name, ms):
    say(f"{name} start")
    await asyncio.sleep(ms / 1000)
    say(f"{name} fails")
    raise Boom()


async def slow():
    say("slow start")
    try:
        await asyncio.sleep(1)
    except asyncio.CancelledError:
        say("slow cancelled")
        raise
    return 4


async def canceller(victim):
    await asyncio.sleep(0.04)
    say(f"canceller: cancel slow -> {int(victim.cancel())}")
    return 0


async def main():
    t1 = asyncio.create_task(ok("ok10", 10, 1))
    t2 = asyncio.create_task(bad("bad20", 20))
    t3 = asyncio.create_task(ok("ok30", 30, 3))
    t4 = asyncio.create_task(slow())
    c = asyncio.create_task(canceller(t4))
    res = await asyncio.gather(t1, t2, t3, t4, return_exceptions=True)
    say("gather -> " + " ".join(fmt(x) for x in res))
    say(f"canceller -> {await outcome(c)}")

run(main)
