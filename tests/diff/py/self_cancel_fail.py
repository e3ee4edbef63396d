"""A task that cancels itself and then fails without awaiting again: in
asyncio only a normal return turns a pending cancellation into CANCELLED;
an exception wins and the task FAILS with it."""
import asyncio
from common import Boom, say, run, outcome, state


async def failer():
    say("failer start")
    say(f"failer cancel self -> {int(asyncio.current_task().cancel())}")
    say("failer raises")
    raise Boom()


async def main():
    t = asyncio.create_task(failer())
    say(f"failer -> {await outcome(t)}")
    say(f"failer state {state(t)}")

run(main)
