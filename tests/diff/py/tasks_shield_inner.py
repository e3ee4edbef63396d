"""shield: when the inner task itself is cancelled the outer future is
cancelled too; the awaiting task sees CancelledError with its own count at
0 (the cancellation was not its own)."""
import asyncio
from common import say, run, outcome, state


async def inner_work():
    say("inner start")
    await asyncio.sleep(0.05)
    say("inner done")
    return 5


async def guarded(inner):
    try:
        r = await asyncio.shield(inner)
        say(f"guarded got {r}")
    except asyncio.CancelledError:
        say(f"guarded cancelled, cancelling {asyncio.current_task().cancelling()}")
        return 9
    return r


async def main():
    inner = asyncio.create_task(inner_work())
    g = asyncio.create_task(guarded(inner))
    await asyncio.sleep(0.01)
    say(f"cancel inner -> {int(inner.cancel())}")
    say(f"guarded -> {await outcome(g)}")
    say(f"inner {state(inner)} guarded {state(g)}")

run(main)
