"""Timeout.reschedule: a later deadline lets the body run past the first,
None removes the deadline, a deadline already passed expires the scope at
the next iteration; rescheduling a scope that has exited is refused."""
import asyncio
from common import say, run


async def main():
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(0.01) as cm:
            cm.reschedule(loop.time() + 0.03)
            await asyncio.sleep(0.02)
            say("past the first deadline")
            cm.reschedule(None)
            say(f"when none {cm.when() is None}")
            await asyncio.sleep(0.02)
            say("no deadline")
            cm.reschedule(loop.time())
            await asyncio.sleep(1)
            say("not reached")
    except TimeoutError:
        say(f"rescheduled timeout, expired {cm.expired()}")
    try:
        cm.reschedule(None)
        say("reschedule after exit accepted")
    except RuntimeError:
        say("reschedule after exit refused")

    async with asyncio.timeout(None) as cm2:
        cm2.reschedule(loop.time() + 0.05)
        await asyncio.sleep(0.01)
        say("in time after reschedule")
    say(f"expired {cm2.expired()}")

run(main)
