"""A cancellation from elsewhere stays a cancellation inside an expired
asyncio.timeout scope: the task is cancelled, then its scope expires before
it runs (two requests); at exit the scope withdraws its own and passes
CancelledError on instead of TimeoutError."""
import asyncio
from common import say, run, outcome, state


async def body(fut):
    me = asyncio.current_task()
    try:
        async with asyncio.timeout(0) as cm:
            await fut
    except TimeoutError:
        say("body timeout")
        return 1
    except asyncio.CancelledError:
        say(f"body cancellation kept, expired {cm.expired()} cancelling {me.cancelling()}")
        raise
    return 0


async def main():
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    t = asyncio.create_task(body(fut))
    await asyncio.sleep(0)
    say(f"cancel body -> {int(t.cancel())}")
    say(f"body -> {await outcome(t)}")
    say(f"body {state(t)} fut cancelled {fut.cancelled()}")

run(main)
