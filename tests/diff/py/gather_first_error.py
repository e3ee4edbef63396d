"""gather's default mode: the first error completes it, the others keep running."""
import asyncio
from common import Boom, say, run, outcome


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


async def main():
    t1 = asyncio.create_task(ok("ok10", 10, 1))
    t2 = asyncio.create_task(bad("bad20", 20))
    t3 = asyncio.create_task(ok("ok30", 30, 3))
    try:
        res = await asyncio.gather(t1, t2, t3)
        say("gather -> " + " ".join(map(str, res)))
    except Boom:
        say("gather -> error")
    say("ok30 " + ("done" if t3.done() else "pending"))
    say(f"ok30 -> {await outcome(t3)}")
    say(f"ok10 -> {await outcome(t1)}")
    say(f"bad20 -> {await outcome(t2)}")

run(main)
