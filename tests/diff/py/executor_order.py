"""Executor jobs (real sleeps of 180/60/120 ms on pool threads) complete in
finishing order; gather still reports argument order.  The jobs sleep in
real time on either clock: 60 ms apart so that the order holds on a loaded
machine, where no retry would hide a flip (see README.md, "Retries")."""
import asyncio
import time
from common import say, run, fut_outcome


def work(ms):
    time.sleep(ms / 1000)
    return ms


async def job(ms):
    say(f"job {ms} submit")
    r = await asyncio.get_running_loop().run_in_executor(None, work, ms)
    say(f"job {ms} done -> {r}")
    return r


async def main():
    loop = asyncio.get_running_loop()
    res = await asyncio.gather(job(180), job(60), job(120))
    say("gather -> " + " ".join(map(str, res)))
    futs = []
    for ms in (180, 60, 120):
        f = loop.run_in_executor(None, work, ms)
        f.add_done_callback(lambda f, ms=ms: say(f"callback {ms} -> {fut_outcome(f)}"))
        futs.append(f)
    for f in futs:
        r = await f
        say(f"awaited {r}")

run(main)
