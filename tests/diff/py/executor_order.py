"""Executor jobs (real sleeps of 90/30/60 ms on pool threads) complete in
finishing order; gather still reports argument order."""
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
    res = await asyncio.gather(job(90), job(30), job(60))
    say("gather -> " + " ".join(map(str, res)))
    futs = []
    for ms in (90, 30, 60):
        f = loop.run_in_executor(None, work, ms)
        f.add_done_callback(lambda f, ms=ms: say(f"callback {ms} -> {fut_outcome(f)}"))
        futs.append(f)
    for f in futs:
        r = await f
        say(f"awaited {r}")

run(main)
