"""call_soon / call_later ordering with tasks.  The timers are 40 ms away so
that the first iterations (slow under ASan on a loaded machine) finish first."""
import asyncio
from common import say, run


def cb(label):
    say(label)


def cb_nested(label):
    say(label)
    asyncio.get_running_loop().call_soon(cb, label + "-nested")


async def tsk():
    say("T run")
    await asyncio.sleep(0.04)
    say("T woke")
    return 1


async def main():
    loop = asyncio.get_running_loop()
    loop.call_soon(cb_nested, "soon1")
    t = asyncio.create_task(tsk())
    loop.call_soon(cb, "soon2")
    loop.call_later(0.08, cb, "later80")
    loop.call_later(0.04, cb, "later40a")
    loop.call_later(0.04, cb, "later40b")
    say("main yield")
    await asyncio.sleep(0)
    say("main after yield")
    await asyncio.sleep(0.12)
    say("main woke at 120")
    await t
    say("main end")

run(main)
