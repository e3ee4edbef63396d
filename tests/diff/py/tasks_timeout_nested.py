"""Nested asyncio.timeout scopes: only the scope whose cancellation it was
turns CancelledError into TimeoutError.  Inner expires first: the inner
converts, the outer goes on.  Outer expires first: the inner passes the
CancelledError through.  Both expire together (timeout_at, same deadline):
two requests; the inner withdraws one and passes the error on, the outer
converts."""
import asyncio
from common import say, run


def cancelling():
    return asyncio.current_task().cancelling()


async def main():
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(0.05) as outer:
        try:
            async with asyncio.timeout(0.01):
                await asyncio.sleep(1)
        except TimeoutError:
            say(f"inner timeout, outer expired {outer.expired()}")
        await asyncio.sleep(0.01)
        say("outer body goes on")
    say(f"outer expired {outer.expired()}")

    try:
        async with asyncio.timeout(0.01) as outer2:
            try:
                async with asyncio.timeout(0.05) as inner2:
                    await asyncio.sleep(1)
            except asyncio.CancelledError:
                say(f"inner2 passes the cancellation, expired {inner2.expired()}")
                raise
    except TimeoutError:
        say(f"outer2 timeout, expired {outer2.expired()} cancelling {cancelling()}")

    when = loop.time() + 0.01
    try:
        async with asyncio.timeout_at(when) as o3:
            try:
                async with asyncio.timeout_at(when) as i3:
                    await asyncio.sleep(1)
            except asyncio.CancelledError:
                say(f"i3 expired {i3.expired()}, cancelling {cancelling()}, passes it on")
                raise
    except TimeoutError:
        say(f"o3 timeout, expired {o3.expired()} cancelling {cancelling()}")

run(main)
