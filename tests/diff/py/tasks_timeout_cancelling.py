"""A timeout scope entered while its task is already being cancelled
(cancelling() == 1: a CancelledError caught and not uncancelled) that then
expires reports TimeoutError: current asyncio (3.11.7, 3.12+) compares
uncancel() with the count taken when the scope was entered, where 3.11.2
compared it with 0 and passed the CancelledError on.  The oracle is
CPython 3.12 (run_diff.py --python; the system's 3.11.2 has the old rule).
a catches nothing: the TimeoutError ends it.  b's scope expires after a
second cancellation came from elsewhere: that one stays a cancellation.
c's two scopes expire together: the inner passes the cancellation on, the
outer reports the timeout."""
import asyncio
from common import say, run, outcome, state


def cancelling():
    return asyncio.current_task().cancelling()


async def caught(name):
    """Sleep until cancelled; catch it and do not uncancel."""
    try:
        await asyncio.sleep(1)
    except asyncio.CancelledError:
        say(f"{name} caught, cancelling {cancelling()}")


async def a_body():
    await caught("a")
    async with asyncio.timeout(0.01):
        await asyncio.sleep(1)
    say("a not reached")
    return 1


async def b_body(fut):
    await caught("b")
    try:
        async with asyncio.timeout(0) as cm:
            await fut
    except TimeoutError:
        say("b timeout")
        return 2
    except asyncio.CancelledError:
        say(f"b cancellation kept, expired {cm.expired()} cancelling {cancelling()}")
        raise
    return 0


async def c_body():
    await caught("c")
    when = asyncio.get_running_loop().time() + 0.01
    try:
        async with asyncio.timeout_at(when) as outer:
            try:
                async with asyncio.timeout_at(when) as inner:
                    await asyncio.sleep(1)
            except asyncio.CancelledError:
                say(f"c inner expired {inner.expired()} cancelling {cancelling()}, passes it on")
                raise
    except TimeoutError:
        say(f"c outer timeout, expired {outer.expired()} cancelling {cancelling()}")
    return 3


async def main():
    a = asyncio.create_task(a_body())
    await asyncio.sleep(0)
    say(f"cancel a -> {int(a.cancel())}")
    say(f"a -> {await outcome(a)}, {state(a)}, cancelling {a.cancelling()}")

    fut = asyncio.get_running_loop().create_future()
    b = asyncio.create_task(b_body(fut))
    await asyncio.sleep(0)
    say(f"cancel b -> {int(b.cancel())}")
    await asyncio.sleep(0)
    say(f"cancel b again -> {int(b.cancel())}")
    say(f"b -> {await outcome(b)}, {state(b)}, fut cancelled {fut.cancelled()}")

    c = asyncio.create_task(c_body())
    await asyncio.sleep(0)
    say(f"cancel c -> {int(c.cancel())}")
    say(f"c -> {await outcome(c)}, {state(c)}")

run(main, oracle=(3, 12))
