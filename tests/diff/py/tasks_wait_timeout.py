"""asyncio.wait with a timeout: it returns with futures pending (no error)
and cancels nothing; a wait that completes first disarms its timer.  A
task cancelled while in wait gets CancelledError; the futures go on."""
import asyncio
from common import say, run, outcome, state


def names(s):
    return " ".join(sorted(t.get_name() for t in s)) or "-"


async def ok(name, ms, value):
    say(f"{name} start")
    await asyncio.sleep(ms / 1000)
    say(f"{name} done")
    return value


async def waiter(fs):
    try:
        done, pending = await asyncio.wait(fs)
        say(f"waiter done {names(done)}")
    except asyncio.CancelledError:
        say("waiter cancelled")
        raise
    return 0


async def main():
    a = asyncio.create_task(ok("a", 30, 1), name="a")
    b = asyncio.create_task(ok("b", 10, 2), name="b")
    done, pending = await asyncio.wait([a, b], timeout=0.02)
    say(f"timeout done {names(done)} pending {names(pending)}")
    say(f"a {state(a)}")
    say(f"a -> {await outcome(a)}")

    c = asyncio.create_task(ok("c", 10, 3), name="c")
    done, pending = await asyncio.wait([c], timeout=0.05)
    say(f"in time done {names(done)} pending {names(pending)}")

    d = asyncio.create_task(ok("d", 30, 4), name="d")
    w = asyncio.create_task(waiter([d]))
    await asyncio.sleep(0.01)
    say(f"cancel waiter -> {int(w.cancel())}")
    say(f"waiter -> {await outcome(w)}")
    say(f"d {state(d)}")
    say(f"d -> {await outcome(d)}")

run(main)
