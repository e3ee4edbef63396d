"""Several tasks sleeping the same delay, started in the same iteration."""
import asyncio
from common import say, run


async def sleeper(name):
    say(f"{name} sleep")
    await asyncio.sleep(0.01)
    say(f"{name} woke")
    await asyncio.sleep(0)
    say(f"{name} after yield")
    await asyncio.sleep(0.01)
    say(f"{name} woke again")


async def main():
    ts = [asyncio.create_task(sleeper(n)) for n in ("A", "B", "C")]
    say("main spawned")
    await asyncio.sleep(0.01)
    say("main woke")
    for t in ts:
        await t
    say("main end")

run(main)
