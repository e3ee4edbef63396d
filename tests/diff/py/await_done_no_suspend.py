"""Awaiting an already-done future or task returns without suspending: no
ticker line can come between."""
import asyncio
from common import say, run, ticker


async def quick():
    say("quick run")
    return 4


async def main():
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(3)
    q = asyncio.create_task(quick())
    await asyncio.sleep(0)
    tk = asyncio.create_task(ticker(4))
    await asyncio.sleep(0)
    say("main resumed")
    r = await fut
    say(f"fut -> {r}")
    r = await q
    say(f"quick -> {r}")
    r = await fut
    say(f"fut again -> {r}")
    await asyncio.sleep(0)
    say("main after yield")
    await tk

run(main)
