"""Tasks waking from different delays (10 ms apart) wake in deadline order."""
import asyncio
from common import say, run


async def sleeper(name, first, second):
    say(f"{name} sleep {first}")
    await asyncio.sleep(first / 1000)
    say(f"{name} woke at {first}")
    await asyncio.sleep(second / 1000)
    say(f"{name} woke at {first + second}")


async def main():
    ts = [asyncio.create_task(sleeper("A", 30, 10)),
          asyncio.create_task(sleeper("B", 10, 50)),
          asyncio.create_task(sleeper("C", 20, 30))]
    for t in ts:
        await t
        say("main awaited one")
    say("main end")

run(main)
