"""How many iterations a gather takes to wake its awaiter (ticker shows it),
for pending children and for children that are already done."""
import asyncio
from common import say, run, ticker


async def stepper(name, n, value):
    for i in range(n):
        say(f"{name} step {i}")
        await asyncio.sleep(0)
    say(f"{name} done")
    return value


async def main():
    tk = asyncio.create_task(ticker(12))
    ts = [asyncio.create_task(stepper("s1", 1, 1)),
          asyncio.create_task(stepper("s3", 3, 3)),
          asyncio.create_task(stepper("s2", 2, 2))]
    res = await asyncio.gather(*ts)
    say("gather -> " + " ".join(map(str, res)))
    res = await asyncio.gather(*ts)
    say("gather again -> " + " ".join(map(str, res)))
    await tk

run(main)
