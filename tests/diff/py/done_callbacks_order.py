"""Done-callbacks (add_done_callback) versus task wakeups: all are scheduled
with call_soon in registration order when the future completes."""
import asyncio
from common import say, run, fut_outcome


def make_cb(label):
    return lambda f: say(f"{label} {fut_outcome(f)}")


async def waiter(name, fut):
    say(f"{name} wait")
    r = await fut
    say(f"{name} got {r}")
    return r


async def short():
    say("short run")
    return 5


async def main():
    fut = asyncio.get_running_loop().create_future()
    cb1, cb2, cb3, cb4, cb5 = (make_cb(f"cb{i}") for i in range(1, 6))
    w1 = asyncio.create_task(waiter("W1", fut))
    await asyncio.sleep(0)
    fut.add_done_callback(cb1)
    w2 = asyncio.create_task(waiter("W2", fut))
    fut.add_done_callback(cb2)
    fut.add_done_callback(cb4)
    say(f"removed {fut.remove_done_callback(cb4)}")
    await asyncio.sleep(0)
    say("main set")
    fut.set_result(7)
    fut.add_done_callback(cb3)
    say("main yield")
    await asyncio.sleep(0)
    say("main after yield 1")
    await asyncio.sleep(0)
    say("main after yield 2")
    await w1
    await w2
    t = asyncio.create_task(short())
    tw = asyncio.create_task(waiter("TW", t))
    t.add_done_callback(cb5)
    r = await t
    say(f"main short -> {r}")
    await tw
    say("main end")

run(main)
