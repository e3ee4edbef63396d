"""Task.uncancel(): two requests delivered as one CancelledError still count
two; uncancel takes them back one at a time and never goes below 0."""
import asyncio
from common import say, run, outcome, state


async def sleeper():
    me = asyncio.current_task()
    try:
        await asyncio.sleep(1)
    except asyncio.CancelledError:
        say(f"sleeper cancelled, cancelling {me.cancelling()}")
        say(f"sleeper uncancel -> {me.uncancel()}")
    try:
        await asyncio.sleep(1)
    except asyncio.CancelledError:
        say(f"sleeper cancelled again, cancelling {me.cancelling()}")
    say(f"sleeper uncancel -> {me.uncancel()}")
    say(f"sleeper uncancel -> {me.uncancel()}")
    say(f"sleeper uncancel at 0 -> {me.uncancel()}")
    return 3


async def main():
    t = asyncio.create_task(sleeper())
    await asyncio.sleep(0)
    say(f"cancel -> {int(t.cancel())}")
    say(f"cancel -> {int(t.cancel())}")
    say(f"t cancelling {t.cancelling()}")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    say(f"t cancelling {t.cancelling()}")
    say(f"cancel -> {int(t.cancel())}")
    say(f"t -> {await outcome(t)}")
    say(f"t {state(t)} cancelling {t.cancelling()}")

run(main)
