"""asyncio.TaskGroup collects every error: two children failing in the same
iteration (the second does not cancel anything more), then the body's own
error appended last.  A body that fails at once cancels children that never
started (they never run)."""
import asyncio
from common import Boom, say, run, fmt, state


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
            f1 = g.create_task(bad("f1", 10))
            f2 = g.create_task(bad("f2", 10))
            try:
                await asyncio.sleep(1)
            except asyncio.CancelledError:
                say(f"body cancelled, cancelling {cancelling()}, raises")
                raise Boom()
    except BaseExceptionGroup as eg:
        say(f"group errors {len(eg.exceptions)}")
    say(f"after group cancelling {cancelling()}")

    try:
        async with asyncio.TaskGroup() as g2:
            s = g2.create_task(sibling("s"))
            await asyncio.sleep(0)
            n = g2.create_task(sibling("n"))
            say("body raises")
            raise Boom()
    except BaseExceptionGroup as eg:
        say(f"group2 errors {len(eg.exceptions)} first {fmt(eg.exceptions[0])}")
    say(f"s {state(s)} n {state(n)}")
    coro = sibling("x")
    try:
        g2.create_task(coro)
    except RuntimeError:
        coro.close()
        say("spawn after exit refused")

run(main)
