"""common.py -- helpers shared by the asyncio side of the differential scenarios.

Every scenario prints one line per event (labels only, no timestamps) and
formats outcomes exactly like tests/diff/scenarios.c: a value prints as the
number, an error as "error", a cancellation as "cancelled", a timeout as
"timeout".
"""
import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vloop  # noqa: E402


class Boom(Exception):
    """The Python side of the C scenarios' -EIO error."""


def say(line):
    print(line, flush=True)


def fmt(x):
    """Format a result value or an exception object."""
    if isinstance(x, asyncio.CancelledError):
        return "cancelled"
    if isinstance(x, TimeoutError):
        return "timeout"
    if isinstance(x, BaseException):
        return "error"
    return str(x)


async def outcome(aw):
    """Await aw (inline, no extra loop iteration) and format its outcome."""
    try:
        return fmt(await aw)
    except BaseException as exc:  # CancelledError is a BaseException
        return fmt(exc)


def fut_outcome(fut):
    """Format the outcome of a done future (marks an error retrieved)."""
    if fut.cancelled():
        return "cancelled"
    exc = fut.exception()
    return fmt(exc) if exc is not None else fmt(fut.result())


def state(task):
    """pending / finished / failed / cancelled, like the C side's state()."""
    if not task.done():
        return "pending"
    if task.cancelled():
        return "cancelled"
    return "failed" if task.exception() is not None else "finished"


async def ticker(n, name="tick"):
    """Print one line per loop iteration for n iterations."""
    for i in range(n):
        say(f"{name} {i}")
        await asyncio.sleep(0)


def run(main, oracle=(3, 11)):
    """asyncio.run(main()); on the virtual clock (vloop.py) when the
    environment has DIFF_CLOCK=virtual (run_diff.py --virtual sets it).
    oracle: the CPython the scenario's expected order comes from (3.12 for
    the few rules 3.11.2 did not have yet; CMakeLists.txt runs those with
    such an interpreter)."""
    if sys.version_info[:2] != oracle:
        print(f"warning: the oracle is CPython {oracle[0]}.{oracle[1]}, "
              f"this is {sys.version.split()[0]}", file=sys.stderr)
    if os.environ.get("DIFF_CLOCK") == "virtual":
        vloop.run(main())
    else:
        asyncio.run(main())
