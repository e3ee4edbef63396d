"""wait_for with a zero timeout (asyncio 3.11's timeout <= 0 path): a done
future returns at once; a pending task is cancelled, awaited, and the call
times out."""
import asyncio
from common import say, run, outcome, state, ticker


async def slow():
    say("slow start")
    try:
        await asyncio.sleep(1)
    except asyncio.CancelledError:
        say("slow cancelled")
        raise
    return 1


async def main():
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(3)
    tk = asyncio.create_task(ticker(6))
    await asyncio.sleep(0)
    say(f"wait_for done future -> {await outcome(asyncio.wait_for(fut, 0))}")
    t = asyncio.create_task(slow())
    say("wait_for pending task")
    say(f"wait_for -> {await outcome(asyncio.wait_for(t, 0))}")
    say(f"slow state {state(t)}")
    await tk

run(main)
