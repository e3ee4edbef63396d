"""sleep(0) sends the task to the back of the ready queue: round-robin."""
import asyncio
from common import say, run


async def spinner(name, n):
    for i in range(n):
        say(f"{name} {i}")
        await asyncio.sleep(0)
    say(f"{name} done")
    return n


async def main():
    ts = [asyncio.create_task(spinner("A", 3)),
          asyncio.create_task(spinner("B", 5)),
          asyncio.create_task(spinner("C", 4))]
    say("main yield")
    await asyncio.sleep(0)
    say("main after yield")
    for t in ts:
        r = await t
        say(f"main awaited {r}")

run(main)
