"""A plain future cancelled under its waiter: the waiter sees the
cancellation but is not itself cancelled, and carries on."""
import asyncio
from common import say, run, outcome


async def waiter(fut):
    say("waiter await")
    try:
        r = await fut
        say(f"waiter got {r}")
    except asyncio.CancelledError:
        say("waiter saw cancelled")
    await asyncio.sleep(0)
    say("waiter continues")
    return 1


async def main():
    fut = asyncio.get_running_loop().create_future()
    w = asyncio.create_task(waiter(fut))
    await asyncio.sleep(0)
    say(f"cancel fut -> {int(fut.cancel())}")
    say(f"cancel fut again -> {int(fut.cancel())}")
    try:
        fut.set_result(1)
        say("set_result -> ok")
    except asyncio.InvalidStateError:
        say("set_result -> already done")
    say(f"waiter -> {await outcome(w)}")
    say("fut " + ("cancelled" if fut.cancelled() else "not cancelled"))

run(main)
