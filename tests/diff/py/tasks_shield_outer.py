"""shield: cancelling the task that awaits a shield cancels the outer future
only; the inner task goes on and its result stays available.  A shield of a
done future is that future.  Passing a result through a shield costs one
more iteration than awaiting directly (the inner done-callback)."""
import asyncio
from common import say, run, outcome, state, ticker


async def inner_work():
    say("inner start")
    await asyncio.sleep(0.02)
    say("inner done")
    return 5


async def guarded(inner):
    try:
        r = await asyncio.shield(inner)
        say(f"guarded got {r}")
    except asyncio.CancelledError:
        say(f"guarded cancelled, cancelling {asyncio.current_task().cancelling()}")
        raise
    return r


async def quick():
    say("quick start")
    await asyncio.sleep(0)
    say("quick end")
    return 7


async def main():
    inner = asyncio.create_task(inner_work())
    g = asyncio.create_task(guarded(inner))
    await asyncio.sleep(0.01)
    say(f"cancel guarded -> {int(g.cancel())}")
    say(f"guarded -> {await outcome(g)}")
    say(f"inner {state(inner)}")
    say(f"inner -> {await outcome(inner)}")
    say(f"shield of done is inner: {asyncio.shield(inner) is inner}")
    tk = asyncio.create_task(ticker(6))
    q = asyncio.create_task(quick())
    say(f"shielded quick -> {await outcome(asyncio.shield(q))}")
    await tk

run(main)
