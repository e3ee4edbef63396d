"""vloop.py -- CPython's asyncio event loop with a virtual clock.

The asyncio counterpart of EVL_LOOP_VIRTUAL_CLOCK: the very same
asyncio.SelectorEventLoop (same _run_once, Task, Future, gather, wait_for),
except that time() is virtual and advances only when the loop would
otherwise sleep: instead of waiting for the nearest timer it jumps to it.
Waits with no timer (executor jobs, call_soon_threadsafe) block for real.

Timers with equal deadlines fire in the order they were armed, as in real
asyncio, whose deadlines are never exactly equal (asyncio's heap compares
deadlines only, so exact ties would otherwise come out in heap order).

It also records every timer (deadline, iteration it was armed in, whether it
fired, when it was cancelled), which gen.py uses to reject programs whose
order would depend on the speed of the machine.
"""
import asyncio
import heapq


def _quantize(t):
    """Round to the nanosecond, so that 0.2 + 0.04 and 0.16 + 0.08 are the
    same deadline (libevl's clock is integer nanoseconds)."""
    return round(t * 1e9) / 1e9


class VirtualTimer(asyncio.TimerHandle):
    __slots__ = ("rec", "seq")

    def __lt__(self, other):
        return (self._when, self.seq) < (other._when, other.seq)

    def cancel(self):
        if not self.cancelled() and self.rec["cancelled_at"] is None:
            self.rec["cancelled_at"] = self._loop.time()
        super().cancel()

    def _run(self):
        self.rec["fired"] = True
        super()._run()


class VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self):
        super().__init__()
        self._vnow = 0.0
        self.iteration = 0
        self.timers = []
        real_select = self._selector.select

        def select(timeout=None):
            events = real_select(0)
            if events:
                return events
            if timeout is None:
                return real_select(None)
            if timeout > 0:
                self._vnow = _quantize(self._vnow + timeout)
            return []

        self._selector.select = select

    def time(self):
        return self._vnow

    def _run_once(self):
        self.iteration += 1
        super()._run_once()

    def call_at(self, when, callback, *args, context=None):
        self._check_closed()
        when = _quantize(when)
        timer = VirtualTimer(when, callback, args, self, context)
        timer.seq = len(self.timers)
        timer.rec = {"when": when, "iter": self.iteration, "cancelled_at": None,
                     "fired": False}
        self.timers.append(timer.rec)
        heapq.heappush(self._scheduled, timer)
        timer._scheduled = True
        return timer


def run(main_coro):
    """asyncio.run(main_coro) on a VirtualLoop; returns (result, loop)."""
    loop = VirtualLoop()
    try:
        asyncio.set_event_loop(loop)
        result = loop.run_until_complete(main_coro)
        loop.run_until_complete(loop.shutdown_default_executor())
        return result, loop
    finally:
        asyncio.set_event_loop(None)
        loop.close()
