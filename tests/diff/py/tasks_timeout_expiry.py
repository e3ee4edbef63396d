"""asyncio.timeout: on expiry the body's await raises CancelledError and the
scope turns it into TimeoutError; a body that finishes in time is left
alone; a body that swallows the cancellation ends normally with the scope
expired; timeout(0) expires at the next iteration (call_soon), timeout(None)
never."""
import asyncio
from common import say, run, ticker


def cancelling():
    return asyncio.current_task().cancelling()


async def main():
    try:
        async with asyncio.timeout(0.01) as cm:
            say(f"when set {cm.when() is not None}")
            await asyncio.sleep(0.05)
            say("not reached")
    except TimeoutError:
        say("timeout caught")
    say(f"expired {cm.expired()} cancelling {cancelling()}")

    async with asyncio.timeout(0.05) as cm2:
        await asyncio.sleep(0.01)
        say("body done")
    say(f"expired {cm2.expired()}")

    async with asyncio.timeout(0.01) as cm3:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            say(f"body swallowed, cancelling {cancelling()}")
    say(f"after swallow expired {cm3.expired()} cancelling {cancelling()}")

    tk = asyncio.create_task(ticker(4))
    try:
        async with asyncio.timeout(0):
            say("zero body")
            await asyncio.sleep(0)
            say("not reached")
    except TimeoutError:
        say("zero timeout")
    await tk

    async with asyncio.timeout(None) as cm4:
        say(f"when none {cm4.when() is None}")
        await asyncio.sleep(0.01)
    say(f"none expired {cm4.expired()}")

run(main)
