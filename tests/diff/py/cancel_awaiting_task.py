"""Cancelling a task that awaits another task cancels the inner one too."""
import asyncio
from common import say, run, outcome, state, ticker


async def inner():
    say("inner start")
    try:
        await asyncio.sleep(1)
    except asyncio.CancelledError:
        say("inner cancelled")
        raise
    return 1


async def outer(inn):
    say("outer start")
    try:
        r = await inn
    except asyncio.CancelledError:
        say("outer cancelled")
        raise
    return r


async def main():
    inn = asyncio.create_task(inner())
    out = asyncio.create_task(outer(inn))
    await asyncio.sleep(0)
    tk = asyncio.create_task(ticker(6))
    say(f"cancel outer -> {int(out.cancel())}")
    say(f"outer -> {await outcome(out)}")
    say(f"inner state {state(inn)}")
    await tk

run(main)
