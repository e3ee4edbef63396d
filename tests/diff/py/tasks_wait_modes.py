"""asyncio.wait's three modes: FIRST_COMPLETED returns after the first
finisher, FIRST_EXCEPTION after the first failure (a cancelled future does
not count) or when all are done, ALL_COMPLETED when all are done.  Done and
pending sets print sorted by name.  Even already-done futures take two
iterations (done-callbacks, then the wakeup)."""
import asyncio
from common import Boom, say, run, outcome, fut_outcome, ticker


def names(s):
    return " ".join(sorted(t.get_name() for t in s)) or "-"


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


def spawn(coro, name):
    return asyncio.create_task(coro, name=name)


async def main():
    a = spawn(ok("a", 10, 1), "a")
    b = spawn(ok("b", 30, 2), "b")
    done, pending = await asyncio.wait([a, b], return_when=asyncio.FIRST_COMPLETED)
    say(f"first_completed done {names(done)} pending {names(pending)}")
    say(f"b -> {await outcome(b)}")

    c = spawn(ok("c", 10, 3), "c")
    d = spawn(bad("d", 20), "d")
    e = spawn(ok("e", 40, 4), "e")
    done, pending = await asyncio.wait([c, d, e], return_when=asyncio.FIRST_EXCEPTION)
    say(f"first_exception done {names(done)} pending {names(pending)}")
    say(f"d -> {fut_outcome(d)}")
    say(f"e -> {await outcome(e)}")

    f = spawn(ok("f", 10, 5), "f")
    g = spawn(ok("g", 20, 6), "g")
    h = spawn(ok("h", 30, 7), "h")
    await asyncio.sleep(0)
    say(f"cancel g -> {int(g.cancel())}")
    done, pending = await asyncio.wait([f, g, h], return_when=asyncio.FIRST_EXCEPTION)
    say(f"first_exception no error done {names(done)} pending {names(pending)}")

    i = spawn(ok("i", 20, 8), "i")
    j = spawn(bad("j", 10), "j")
    done, pending = await asyncio.wait([i, j, i])
    say(f"all_completed done {names(done)} pending {names(pending)}")
    say(f"i -> {fut_outcome(i)} j -> {fut_outcome(j)}")

    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    fut.set_result(9)
    tk = spawn(ticker(4), "tk")
    done, pending = await asyncio.wait([fut])
    say(f"already done: done {len(done)} pending {len(pending)}")
    await tk

run(main)
