"""A task fails with an error; the tasks awaiting it see the error."""
import asyncio
from common import Boom, say, run, outcome, state, fut_outcome


async def failer(name, ms):
    say(f"{name} start")
    if ms:
        await asyncio.sleep(ms / 1000)
    say(f"{name} raise")
    raise Boom()


async def watcher(t):
    say("watcher await")
    say(f"watcher -> {await outcome(t)}")


async def main():
    f1 = asyncio.create_task(failer("f1", 10))
    w = asyncio.create_task(watcher(f1))
    f1.add_done_callback(lambda f: say(f"callback f1 {fut_outcome(f)}"))
    say(f"main f1 -> {await outcome(f1)}")
    await w
    f2 = asyncio.create_task(failer("f2", 0))
    await asyncio.sleep(0)
    say(f"f2 state {state(f2)}")
    say(f"main f2 -> {await outcome(f2)}")

run(main)
