"""wait_for times out but the task swallows the cancellation and returns a
value: asyncio 3.11's wait_for then returns that value, not a timeout."""
import asyncio
from common import say, run, state, outcome


async def stubborn():
    say("stubborn start")
    try:
        await asyncio.sleep(1)
    except asyncio.CancelledError:
        say("stubborn swallowed")
    return 9


async def main():
    t = asyncio.create_task(stubborn())
    say("main wait_for 20ms")
    say(f"wait_for -> {await outcome(asyncio.wait_for(t, 0.02))}")
    say(f"stubborn state {state(t)}")

run(main)
