"""Tasks spawning tasks spawning tasks."""
import asyncio
from common import say, run


async def leaf(name):
    say(f"{name} start")
    await asyncio.sleep(0)
    say(f"{name} end")
    return 1


async def mid(name, kids):
    say(f"{name} start")
    ts = [asyncio.create_task(leaf(k)) for k in kids]
    say(f"{name} spawned")
    total = 0
    for t in ts:
        total += await t
    say(f"{name} end {total}")
    return total


async def top():
    say("top start")
    a = asyncio.create_task(mid("A", ["A1", "A2"]))
    b = asyncio.create_task(mid("B", ["B1"]))
    await asyncio.sleep(0)
    say("top yielded")
    r = await a
    r += await b
    say(f"top end {r}")
    return r


async def main():
    t = asyncio.create_task(top())
    c = asyncio.create_task(leaf("C"))
    say(f"main top -> {await t}")
    say(f"main C -> {await c}")

run(main)
