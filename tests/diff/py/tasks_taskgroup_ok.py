"""asyncio.TaskGroup without errors: exit waits for every child (one
iteration for the last child's done-callback, one for the wakeup); a child
may add a sibling while the parent waits in exit; adding after the group
has finished is refused."""
import asyncio
from common import say, run, ticker


async def ok(name, ms, value):
    say(f"{name} start")
    await asyncio.sleep(ms / 1000)
    say(f"{name} done")
    return value


async def quick():
    say("quick start")
    await asyncio.sleep(0)
    say("quick end")
    return 7


async def main():
    async with asyncio.TaskGroup() as g:
        a = g.create_task(ok("a", 20, 1))
        b = g.create_task(ok("b", 10, 2))
        say("body end")
    say(f"group done a {a.result()} b {b.result()}")

    async def spawner(grp):
        await asyncio.sleep(0.01)
        grp.create_task(ok("late", 10, 3))
        say("spawned late")

    async with asyncio.TaskGroup() as g2:
        g2.create_task(spawner(g2))
        say("body2 end")
    say("group2 done")
    coro = ok("never", 10, 0)
    try:
        g2.create_task(coro)
        say("spawn after exit accepted")
    except RuntimeError:
        coro.close()
        say("spawn after exit refused")

    tk = asyncio.create_task(ticker(6))
    async with asyncio.TaskGroup() as g3:
        g3.create_task(quick())
    say("group3 done")
    await tk

run(main)
