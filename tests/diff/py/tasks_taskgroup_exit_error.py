"""asyncio.TaskGroup (3.11): a child fails while the parent already waits
in exit.  The group cancels the parent's wait (swallowed: it is aborting)
and the sibling, and raises the group; since exit had passed its uncancel,
the parent's count stays 1 (a 3.11 trait) until the program takes it
back."""
import asyncio
from common import Boom, say, run


def cancelling():
    return asyncio.current_task().cancelling()


async def bad(name, ms):
    say(f"{name} start")
    await asyncio.sleep(ms / 1000)
    say(f"{name} fails")
    raise Boom()


async def sibling(name):
    say(f"{name} start")
    try:
        await asyncio.sleep(1)
    except asyncio.CancelledError:
        say(f"{name} cancelled")
        raise
    return 0


async def main():
    try:
        async with asyncio.TaskGroup() as g:
            g.create_task(sibling("s"))
            g.create_task(bad("f", 10))
            say("body end")
    except BaseExceptionGroup as eg:
        say(f"group errors {len(eg.exceptions)}")
    say(f"after group cancelling {cancelling()}")
    await asyncio.sleep(0)
    say("sleep(0) fine")
    say(f"uncancel -> {asyncio.current_task().uncancel()}")

run(main)
