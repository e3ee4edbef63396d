"""Cancel of a task that was already woken but has not run yet: its await
still reports cancellation.  Once with a future, once with two sleeps."""
import asyncio
from common import say, run, outcome


async def waiter(fut):
    say("B await fut")
    try:
        r = await fut
        say(f"B got {r}")
    except asyncio.CancelledError:
        say("B cancelled after wake")
    r = await fut
    say(f"B then got {r}")
    return r


async def waker(fut, b):
    say("A set result")
    fut.set_result(7)
    say(f"A cancel B -> {int(b.cancel())}")
    return 0


async def xsleep(holder):
    say("X sleep")
    await asyncio.sleep(0.01)
    say(f"X woke, cancel Y -> {int(holder[0].cancel())}")
    return 0


async def ysleep():
    say("Y sleep")
    try:
        await asyncio.sleep(0.01)
        say("Y woke")
    except asyncio.CancelledError:
        say("Y cancelled")
        raise
    return 0


async def main():
    fut = asyncio.get_running_loop().create_future()
    b = asyncio.create_task(waiter(fut))
    await asyncio.sleep(0)
    a = asyncio.create_task(waker(fut, b))
    say(f"B -> {await outcome(b)}")
    say(f"A -> {await outcome(a)}")
    holder = []
    x = asyncio.create_task(xsleep(holder))
    y = asyncio.create_task(ysleep())
    holder.append(y)
    say(f"Y -> {await outcome(y)}")
    say(f"X -> {await outcome(x)}")

run(main)
