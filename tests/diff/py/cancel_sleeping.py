"""Cancelling a sleeping task (twice); a ticker shows the iterations it takes."""
import asyncio
from common import say, run, outcome, state, ticker


async def sleeper():
    say("sleeper start")
    try:
        await asyncio.sleep(1)
    except asyncio.CancelledError:
        say("sleeper cancelled")
        raise
    say("sleeper woke")


async def main():
    t = asyncio.create_task(sleeper())
    tk = asyncio.create_task(ticker(6))
    await asyncio.sleep(0)
    say(f"cancel -> {int(t.cancel())}")
    say(f"cancel again -> {int(t.cancel())}")
    say(f"sleeper state {state(t)}")
    say(f"sleeper -> {await outcome(t)}")
    say(f"sleeper state {state(t)}")
    say(f"cancel done task -> {int(t.cancel())}")
    await tk

run(main)
