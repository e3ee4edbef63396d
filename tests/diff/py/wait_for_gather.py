"""wait_for of a gather whose timeout fires: cancelling the gather cancels
its children, the gather ends with CancelledError as its exception (a
child was cancelled), and wait_for turns that into TimeoutError, as it does
a cancelled future (3.11: "return fut.result() except CancelledError:
raise TimeoutError")."""
import asyncio
from common import say, run, state, outcome


async def slow(name):
    say(f"{name} start")
    try:
        await asyncio.sleep(1)
    except asyncio.CancelledError:
        say(f"{name} cancelled")
        raise
    return 1


async def main():
    a = asyncio.create_task(slow("a"))
    b = asyncio.create_task(slow("b"))
    say("main wait_for gather 20ms")
    say(f"wait_for -> {await outcome(asyncio.wait_for(asyncio.gather(a, b), 0.02))}")
    say(f"a state {state(a)}, b state {state(b)}")

run(main)
