"""call_later(0): due at the next iteration, queued after what is already ready."""
import asyncio
from common import say, run, ticker


def cb(label):
    say(label)


async def main():
    loop = asyncio.get_running_loop()
    tk = asyncio.create_task(ticker(4))
    loop.call_soon(cb, "soon a")
    loop.call_later(0, cb, "later0 b")
    loop.call_soon(cb, "soon c")
    say("main yield")
    await asyncio.sleep(0)
    say("main after yield")
    loop.call_later(0, cb, "later0 d")
    loop.call_later(0, cb, "later0 e")
    await asyncio.sleep(0)
    say("main after yield 2")
    await tk

run(main)
