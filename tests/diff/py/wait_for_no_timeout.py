"""wait_for whose awaitable finishes first; and wait_for on a done future
(which still takes two iterations in asyncio 3.11, as a ticker shows)."""
import asyncio
from common import say, run, ticker, outcome


async def quick():
    say("quick start")
    await asyncio.sleep(0.01)
    say("quick done")
    return 5


async def main():
    t = asyncio.create_task(quick())
    say(f"wait_for -> {await outcome(asyncio.wait_for(t, 0.5))}")
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(3)
    tk = asyncio.create_task(ticker(6))
    await asyncio.sleep(0)
    say("wait_for done future")
    say(f"wait_for -> {await outcome(asyncio.wait_for(fut, 0.5))}")
    await tk

run(main)
