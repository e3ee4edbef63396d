"""Cancelling a task that awaits a gather cancels the gathered tasks."""
import asyncio
from common import say, run, outcome, state, ticker


async def child(name):
    say(f"{name} start")
    try:
        await asyncio.sleep(1)
    except asyncio.CancelledError:
        say(f"{name} cancelled")
        raise
    return 1


async def gatherer(ts):
    say("gatherer await")
    try:
        await asyncio.gather(*ts)
    except asyncio.CancelledError:
        say("gatherer cancelled")
        raise
    return 2


async def main():
    c1 = asyncio.create_task(child("c1"))
    c2 = asyncio.create_task(child("c2"))
    g = asyncio.create_task(gatherer([c1, c2]))
    await asyncio.sleep(0)
    tk = asyncio.create_task(ticker(7))
    say(f"cancel gatherer -> {int(g.cancel())}")
    say(f"gatherer -> {await outcome(g)}")
    say(f"states {state(c1)} {state(c2)} {state(g)}")
    await tk

run(main)
