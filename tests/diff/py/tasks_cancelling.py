"""Task.cancelling(): after `await t` raised CancelledError, the caller's own
count of cancellation requests says whose cancellation it was (0: the
awaited task's, > 0: its own).  Cancelling a done task counts nothing."""
import asyncio
from common import say, run, outcome, state


async def child():
    say("child start")
    await asyncio.sleep(1)
    say("child end")
    return 1


async def awaiter(t):
    me = asyncio.current_task()
    try:
        await t
    except asyncio.CancelledError:
        say(f"awaiter cancelled, cancelling {me.cancelling()}")
        if me.cancelling():
            raise
        return 2
    return 0


async def main():
    c1 = asyncio.create_task(child())
    a1 = asyncio.create_task(awaiter(c1))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    say(f"cancel child -> {int(c1.cancel())}")
    say(f"a1 -> {await outcome(a1)}")
    say(f"c1 {state(c1)} cancelling {c1.cancelling()}")
    say(f"cancel done child -> {int(c1.cancel())} cancelling {c1.cancelling()}")
    c2 = asyncio.create_task(child())
    a2 = asyncio.create_task(awaiter(c2))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    say(f"cancel awaiter -> {int(a2.cancel())}")
    say(f"a2 cancelling {a2.cancelling()} c2 cancelling {c2.cancelling()}")
    say(f"a2 -> {await outcome(a2)}")
    say(f"c2 {state(c2)} a2 {state(a2)}")
    say(f"main cancelling {asyncio.current_task().cancelling()}")

run(main)
