"""Cancelling a task before its first step: its body never runs."""
import asyncio
from common import say, run, outcome, state, ticker, fut_outcome


async def body():
    say("body ran")
    return 1


async def main():
    tk = asyncio.create_task(ticker(5))
    t = asyncio.create_task(body())
    t.add_done_callback(lambda f: say(f"done-callback {fut_outcome(f)}"))
    say(f"cancel -> {int(t.cancel())}")
    say(f"state {state(t)}")
    await asyncio.sleep(0)
    say(f"state {state(t)}")
    say(f"body -> {await outcome(t)}")
    await tk

run(main)
