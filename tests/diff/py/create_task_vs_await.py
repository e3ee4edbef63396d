"""create_task before vs after awaiting a coroutine directly (no task)."""
import asyncio
from common import say, run


async def child(name):
    say(f"{name} start")
    await asyncio.sleep(0)
    say(f"{name} end")
    return len(name)


async def main():
    say("main start")
    t = asyncio.create_task(child("spawned"))
    say("main created spawned")
    r = await child("inline")
    say(f"main inline -> {r}")
    r = await t
    say(f"main spawned -> {r}")
    r = await child("inline2")
    t2 = asyncio.create_task(child("spawned2"))
    say(f"main inline2 -> {r}")
    r = await t2
    say(f"main spawned2 -> {r}")
    say("main end")

run(main)
