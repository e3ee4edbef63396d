"""Two cancel() calls on a suspended task deliver one cancellation; the
task swallows it and its next await is not cancelled."""
import asyncio
from common import say, run, outcome, state


async def stubborn():
    say("stubborn start")
    try:
        await asyncio.sleep(1)
    except asyncio.CancelledError:
        say("stubborn caught 1")
    try:
        await asyncio.sleep(0)
        say("stubborn yield ok")
    except asyncio.CancelledError:
        say("stubborn caught 2")
    return 3


async def main():
    t = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    say(f"cancel 1 -> {int(t.cancel())}")
    say(f"cancel 2 -> {int(t.cancel())}")
    say(f"stubborn -> {await outcome(t)}")
    say(f"stubborn state {state(t)}")

run(main)
