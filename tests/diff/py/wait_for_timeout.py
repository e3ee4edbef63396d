"""wait_for whose timeout fires: the task is cancelled and awaited first."""
import asyncio
from common import say, run, state, outcome


async def slow():
    say("slow start")
    try:
        await asyncio.sleep(1)
    except asyncio.CancelledError:
        say("slow cancelled")
        raise
    return 1


async def main():
    t = asyncio.create_task(slow())
    say("main wait_for 20ms")
    say(f"wait_for -> {await outcome(asyncio.wait_for(t, 0.02))}")
    say(f"slow state {state(t)}")

run(main)
