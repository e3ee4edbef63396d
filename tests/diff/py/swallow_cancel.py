"""A task that catches its cancellation and carries on finishes normally."""
import asyncio
from common import say, run, outcome, state


async def stubborn():
    say("stubborn start")
    try:
        await asyncio.sleep(1)
        say("stubborn woke")
    except asyncio.CancelledError:
        say("stubborn swallowed")
    await asyncio.sleep(0.01)
    say("stubborn slept again")
    return 42


async def main():
    t = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    say(f"cancel -> {int(t.cancel())}")
    say(f"stubborn -> {await outcome(t)}")
    say(f"stubborn state {state(t)}")

run(main)
