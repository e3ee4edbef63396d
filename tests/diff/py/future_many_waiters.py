"""One future, several waiters; set_result from another task."""
import asyncio
from common import say, run


async def waiter(name, fut):
    say(f"{name} wait")
    r = await fut
    say(f"{name} got {r}")
    await asyncio.sleep(0)
    say(f"{name} after yield")


async def setter(fut):
    say("setter start")
    await asyncio.sleep(0)
    say("setter set")
    fut.set_result(7)
    say("setter after set")
    await asyncio.sleep(0)
    say("setter after yield")


async def main():
    fut = asyncio.get_running_loop().create_future()
    ts = [asyncio.create_task(waiter(n, fut)) for n in ("W1", "W2", "W3")]
    ts.append(asyncio.create_task(setter(fut)))
    for t in ts:
        await t
    say("main end")

run(main)
