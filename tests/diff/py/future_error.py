"""A future failed from a call_soon callback: every waiter sees the error."""
import asyncio
from common import Boom, say, run, outcome


async def waiter(name, fut):
    say(f"{name} wait")
    say(f"{name} -> {await outcome(fut)}")


def fail(fut):
    say("callback sets error")
    fut.set_exception(Boom())


async def main():
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    w1 = asyncio.create_task(waiter("W1", fut))
    w2 = asyncio.create_task(waiter("W2", fut))
    loop.call_soon(fail, fut)
    await w1
    await w2
    say(f"main -> {await outcome(fut)}")

run(main)
