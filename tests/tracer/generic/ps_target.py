#!/usr/bin/env python3
"""ps_target.py -- an asyncio program with tasks parked in known places,
for `loopscope ps` (tests/tracer/test_ps.py).

    ps_target.py [--no-asyncio]

Sets up the tasks below, then prints "ready" once every one of them is
parked (checked on asyncio's own objects, not timed) and waits for
SIGTERM.  The lines where tasks park carry a marker comment (# AT-...)
for the test to find their line numbers.  --no-asyncio: never imports
asyncio; prints "ready" and sleeps.

    dl-a, dl-b      hold lock A / B, then wait for B / A: deadlocked
    awaited         sleeps; awaiter awaits it (a task awaiting a task)
    q-get           Queue.get() on an empty queue
    fan             gathers fan-0, fan-1, fan-2, which sleep
    sleeper         asyncio.sleep
    ev-wait         Event.wait()
    exec            run_in_executor (a thread that waits on an Event)
    plain-fut       awaits a bare future
    failer          raised ValueError, never retrieved (kept referenced)
    ac-1, ac-2      await each other (an await cycle)
    deep            parked under 80 coroutine frames (more than a census keeps)
    EVIL            a name with an ANSI escape, a newline, a tab, a quote,
                    a backslash and a bidirectional override
    main            the main task, awaits a bare future (under run)
"""
import sys

if "--no-asyncio" in sys.argv:
    import time
    print("ready", flush=True)
    time.sleep(3600)
    sys.exit(0)

import asyncio
import threading

FOREVER = 3600
STOP = threading.Event()


async def deadlocker(first, second, both):
    async with first:  # AT-HOLD
        both.append(1)
        while len(both) < 2:
            await asyncio.sleep(0)
        async with second:  # AT-DL-WAIT
            pass


async def awaited_body():
    await asyncio.sleep(FOREVER)  # AT-AWAITED


async def awaiter_body(t):
    await t  # AT-AWAITER


async def getter(q):
    await q.get()  # AT-QGET


async def fan_leaf():
    await asyncio.sleep(FOREVER)  # AT-FAN-LEAF


async def fan_out():
    leaves = [asyncio.create_task(fan_leaf(), name=f"fan-{i}") for i in range(3)]
    await asyncio.gather(*leaves)  # AT-GATHER


async def sleeper():
    await asyncio.sleep(FOREVER)  # AT-SLEEP


async def ev_waiter(ev):
    await ev.wait()  # AT-EVENT


async def executor_user():
    await asyncio.get_running_loop().run_in_executor(None, STOP.wait)  # AT-EXEC


async def fut_waiter(fut):
    await fut  # AT-FUTURE


async def await_box(box, key):
    await box[key]  # AT-CYCLE


async def deep(n, ev):
    if n:
        await deep(n - 1, ev)  # AT-DEEP
    else:
        await ev.wait()  # AT-DEEP-END


async def failer():
    raise ValueError("never retrieved")


KEEP = []
EVIL = 'evil\x1b[31m\n"\\\t\u202eX'


def ready():
    print("ready", flush=True)


async def main():
    asyncio.current_task().set_name("main")
    loop = asyncio.get_running_loop()
    a, b, both = asyncio.Lock(), asyncio.Lock(), []
    q = asyncio.Queue()
    ev = asyncio.Event()
    aw = asyncio.create_task(awaited_body(), name="awaited")
    KEEP.extend([
        asyncio.create_task(deadlocker(a, b, both), name="dl-a"),
        asyncio.create_task(deadlocker(b, a, both), name="dl-b"),
        aw,
        asyncio.create_task(awaiter_body(aw), name="awaiter"),
        asyncio.create_task(getter(q), name="q-get"),
        asyncio.create_task(fan_out(), name="fan"),
        asyncio.create_task(sleeper(), name="sleeper"),
        asyncio.create_task(ev_waiter(ev), name="ev-wait"),
        asyncio.create_task(executor_user(), name="exec"),
        asyncio.create_task(fut_waiter(loop.create_future()), name="plain-fut"),
    ])
    box = {}
    box["ac-2"] = asyncio.create_task(await_box(box, "ac-1"), name="ac-2")
    box["ac-1"] = asyncio.create_task(await_box(box, "ac-2"), name="ac-1")
    KEEP.extend(box.values())
    KEEP.append(asyncio.create_task(deep(80, ev), name="deep"))
    KEEP.append(asyncio.create_task(ev.wait(), name=EVIL))
    fail = asyncio.create_task(failer(), name="failer")
    KEEP.append(fail)
    KEEP.extend([q, ev])
    # parked: both locks have a waiter, the queue a getter, failer is done;
    # every other task parks in its first step or two
    for _ in range(10000):
        if (a._waiters and b._waiters and q._getters and fail.done()
                and sum(1 for t in asyncio.all_tasks() if t.get_name().startswith("fan-")) == 3):
            break
        await asyncio.sleep(0)
    else:
        print("not parked", flush=True)
        sys.exit(3)
    for _ in range(10):
        await asyncio.sleep(0)
    # "ready" from a callback: it runs once main itself is parked
    loop.call_soon(ready)
    await loop.create_future()  # AT-MAIN


async def run():
    try:
        await main()  # AT-RUN
    finally:
        STOP.set()       # or asyncio.run waits for the executor's thread


asyncio.run(run())
