"""The task running wait_for is itself cancelled: wait_for cancels the inner
task, waits for it (it swallows and returns a value) and still reports the
cancellation to its caller."""
import asyncio
from common import say, run, outcome, state, ticker


async def stubborn():
    say("inner start")
    try:
        await asyncio.sleep(1)
    except asyncio.CancelledError:
        say("inner swallowed")
    await asyncio.sleep(0)
    say("inner returns 5")
    return 5


async def waiter(inner):
    say("waiter wait_for")
    r = await outcome(asyncio.wait_for(inner, 1))
    say(f"waiter wait_for -> {r}")
    return 7


async def main():
    inner = asyncio.create_task(stubborn())
    w = asyncio.create_task(waiter(inner))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    tk = asyncio.create_task(ticker(7))
    say(f"cancel waiter -> {int(w.cancel())}")
    say(f"waiter -> {await outcome(w)}")
    say(f"inner -> {await outcome(inner)}")
    say(f"states {state(inner)} {state(w)}")
    await tk

run(main)
