"""gather returns results in argument order, whatever the finishing order."""
import asyncio
from common import say, run


async def worker(name, ms, value):
    say(f"{name} start")
    await asyncio.sleep(ms / 1000)
    say(f"{name} done")
    return value


async def main():
    res = await asyncio.gather(worker("w30", 30, 1), worker("w10", 10, 2),
                               worker("w20", 20, 3))
    say("gather -> " + " ".join(map(str, res)))

run(main)
