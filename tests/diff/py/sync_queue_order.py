"""Queue kinds: FIFO, LIFO, and a priority queue of (key, item) tuples
(equal keys: the smaller item first, as heapq compares tuples);
put_nowait on a full queue and get_nowait on an empty one fail."""
import asyncio
from common import say, run


def drain(q):
    out = []
    while not q.empty():
        out.append(q.get_nowait())
    return out


async def main():
    fifo = asyncio.Queue()
    lifo = asyncio.LifoQueue()
    for i in (3, 1, 4, 1, 5, 9, 2, 6):
        fifo.put_nowait(i)
        lifo.put_nowait(i)
    say(f"fifo qsize {fifo.qsize()} full {fifo.full()}")
    say("fifo " + " ".join(str(x) for x in drain(fifo)))
    say("lifo " + " ".join(str(x) for x in drain(lifo)))
    pq = asyncio.PriorityQueue()
    for key, item in ((5, 50), (1, 12), (3, 30), (1, 10), (-2, 7), (3, 31), (1, 11),
                      (0, 99), (5, 40), (1, 10)):
        pq.put_nowait((key, item))
    say("prio " + " ".join(f"{k}:{v}" for k, v in drain(pq)))
    # a bigger heap, pseudo-random keys with many ties
    x = 7
    for i in range(100):
        x = (x * 1103515245 + 12345) % 2147483648
        pq.put_nowait((x % 13, i))
    say("prio100 " + " ".join(f"{k}:{v}" for k, v in drain(pq)))
    small = asyncio.Queue(maxsize=2)
    small.put_nowait(1)
    small.put_nowait(2)
    say(f"small full {small.full()} qsize {small.qsize()} maxsize {small.maxsize}")
    try:
        small.put_nowait(3)
    except asyncio.QueueFull:
        say("small QueueFull")
    drain(small)
    try:
        small.get_nowait()
    except asyncio.QueueEmpty:
        say("small QueueEmpty")
    await asyncio.sleep(0)

run(main)
