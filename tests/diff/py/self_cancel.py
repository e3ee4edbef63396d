"""A task cancelling itself: returning with the request pending ends it
cancelled; the next await otherwise raises the cancellation."""
import asyncio
from common import say, run, outcome, state


async def quitter():
    say("quitter start")
    say(f"quitter cancel self -> {int(asyncio.current_task().cancel())}")
    say("quitter returns 5")
    return 5


async def catcher():
    say("catcher start")
    asyncio.current_task().cancel()
    try:
        await asyncio.sleep(0)
        say("catcher not cancelled")
    except asyncio.CancelledError:
        say("catcher caught")
    await asyncio.sleep(0)
    say("catcher returns 7")
    return 7


async def main():
    q = asyncio.create_task(quitter())
    c = asyncio.create_task(catcher())
    say(f"quitter -> {await outcome(q)}")
    say(f"catcher -> {await outcome(c)}")
    say(f"states {state(q)} {state(c)}")

run(main)
