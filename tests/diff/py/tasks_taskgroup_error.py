"""asyncio.TaskGroup: the first child that fails cancels its siblings and
the parent's body; exit withdraws the parent's cancellation (its count is
back to 0) and raises the group of errors."""
import asyncio
from common import Boom, say, run, fmt, state


def cancelling():
    return asyncio.current_task().cancelling()


async def ok(name, ms, value):
    say(f"{name} start")
    await asyncio.sleep(ms / 1000)
    say(f"{name} done")
    return value


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
            w = g.create_task(ok("w", 10, 1))
            s = g.create_task(sibling("s"))
            f = g.create_task(bad("f", 20))
            try:
                await asyncio.sleep(1)
            except asyncio.CancelledError:
                say(f"body cancelled, cancelling {cancelling()}")
                raise
        say("not reached")
    except BaseExceptionGroup as eg:
        say(f"group errors {len(eg.exceptions)} first {fmt(eg.exceptions[0])}")
    say(f"after group cancelling {cancelling()}")
    say(f"w {state(w)} s {state(s)} f {state(f)}")
    await asyncio.sleep(0.01)
    say("main goes on")

run(main)
