"""asyncio.TaskGroup whose parent task is cancelled from elsewhere: in the
body (the exit cancels the children, waits for them and propagates
CancelledError), and while waiting in exit (the same, the count of the
parent's requests stays 1)."""
import asyncio
from common import say, run, outcome, state


def cancelling():
    return asyncio.current_task().cancelling()


async def sibling(name):
    say(f"{name} start")
    try:
        await asyncio.sleep(1)
    except asyncio.CancelledError:
        say(f"{name} cancelled")
        raise
    return 0


async def parent(wait_in_body):
    try:
        async with asyncio.TaskGroup() as g:
            c = g.create_task(sibling("c"))
            if wait_in_body:
                await asyncio.sleep(1)
            say("body end")
    except asyncio.CancelledError:
        say(f"parent cancelled, cancelling {cancelling()}, child {state(c)}")
        raise
    return 1


async def main():
    for wait_in_body in (True, False):
        p = asyncio.create_task(parent(wait_in_body))
        await asyncio.sleep(0.01)
        say(f"cancel parent -> {int(p.cancel())}")
        say(f"parent -> {await outcome(p)}")

run(main)
