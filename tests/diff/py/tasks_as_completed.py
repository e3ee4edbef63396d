"""asyncio.as_completed yields outcomes in completion order; an item that
is already queued comes back without suspending; with a timeout, each
future still pending when it passes gives TimeoutError."""
import asyncio
from common import Boom, say, run, outcome, ticker


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


async def main():
    a = asyncio.create_task(ok("a", 30, 1))
    b = asyncio.create_task(ok("b", 10, 2))
    c = asyncio.create_task(bad("c", 20))
    for aw in asyncio.as_completed([a, b, c, b]):
        say(f"next -> {await outcome(aw)}")

    loop = asyncio.get_running_loop()
    f1 = loop.create_future()
    f2 = loop.create_future()

    def finish():
        say("finish")
        f2.set_result(22)
        f1.set_result(11)

    tk = asyncio.create_task(ticker(5))
    loop.call_soon(finish)
    for aw in asyncio.as_completed([f1, f2]):
        say(f"futures next -> {await outcome(aw)}")
    await tk

    d = asyncio.create_task(ok("d", 10, 4))
    e = asyncio.create_task(ok("e", 40, 5))
    f = asyncio.create_task(ok("f", 50, 6))
    for aw in asyncio.as_completed([d, e, f], timeout=0.02):
        say(f"timed next -> {await outcome(aw)}")
    say(f"e -> {await outcome(e)}")
    say(f"f -> {await outcome(f)}")

run(main)
