#!/usr/bin/env python3
"""gen.py -- random differential programs: generator, spec format, asyncio interpreter.

A program is a tree of tasks plus a few shared futures.  Task 0 is main;
every other task is spawned exactly once, by its parent.  Each task runs a
straight list of operations.  The spec is line based so that
tests/diff/interp.c can parse it with a few lines of C:

    # comment
    futures N         N shared futures f0..f(N-1) (optional line, default 0)
    task K            start of task K's operations
    print N           print a mark
    sleep D           asyncio.sleep(D ms) / evl_sleep(EVL_MS(D)); D = 0 yields
    sleepc D          the same, but a cancellation here is not swallowed:
                      the task skips to its joins and then ends cancelled
    spawn C           create_task(task C) / evl_spawn
    await C           await task C
    cancel C          task C .cancel() / evl_cancel
    gather M C1 C2..  gather(children, return_exceptions=M) / evl_gather
    waitfor C D       wait_for(task C, D ms) / evl_wait_for
    join C            await C until it is done (even if this task is
                      cancelled meanwhile), then print its outcome; a task
                      exiting early after sleepc skips children it never
                      spawned
    fset F V          fF.set_result(V) / evl_future_set_result
    ffail F           fF.set_exception(Boom()) / evl_future_set_error(-EIO)
    fcancel F         fF.cancel() / evl_cancel
    fawait F          await fF
    fcb F N           fF.add_done_callback(print "cb<N> f<F> -> outcome")
    soon N            loop.call_soon(print "soon<N>") / evl_call_soon
    later N D         loop.call_later(D ms, print "later<N>") / evl_call_later
    cancelself        current_task().cancel() / evl_cancel(evl_current_task())
    return V          return V (>= 0)
    fail              raise Boom / return -EIO
    end               end of task K

Every operation prints one line (see _run_task); a cancellation that
reaches a task is caught and printed, and the task carries on, except in
sleepc.  Each task joins all its children before it ends (also when it ends
cancelled), so nothing is pending when main returns.  When there are
futures, task 1 is the "setter": main spawns it first and joins it last, it
only sleeps, prints, schedules callbacks and completes futures, and it
completes every future at least once, so no await on a future can hang.

Timing robustness: the generator runs each candidate under CPython asyncio
with a virtual clock (vloop.py) and rejects programs in which two timers
that matter are due within UNIT_MS of each other, unless they were armed in
the same loop iteration with the same delay (those fire in the same
iteration in both asyncio and libevl), and programs that print anything
after main's last line.  So the order never depends on the machine's speed.

    gen.py --seed S [--index I]          print one program
    gen.py --run FILE [--virtual-time]   interpret FILE with asyncio
"""
import argparse
import asyncio
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vloop  # noqa: E402

MAX_TRIES = 200
# Every delay is a multiple of UNIT_MS, and timers that matter are due at
# least UNIT_MS apart: the margin the real-clock runs get against a slow or
# loaded machine (10 ms was not enough under ASan on a loaded 2-core box).
UNIT_MS = 20
MAX_DURATION = 0.5    # seconds of (virtual) time a program may take


class Boom(Exception):
    pass


class Program:
    """tasks: {K: [op tuple, ...]}; nfut: number of shared futures."""

    def __init__(self, tasks, nfut=0):
        self.tasks = tasks
        self.nfut = nfut


# ----------------------------------------------------------------- spec

def format_spec(prog, header=""):
    lines = [f"# {header}"] if header else []
    if prog.nfut:
        lines.append(f"futures {prog.nfut}")
    for k in sorted(prog.tasks):
        lines.append(f"task {k}")
        lines += [" ".join(str(x) for x in op) for op in prog.tasks[k]]
        lines.append("end")
    return "\n".join(lines) + "\n"


def parse_spec(text):
    tasks, nfut, cur = {}, 0, None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        tok = line.split()
        if tok[0] == "futures":
            nfut = int(tok[1])
        elif tok[0] == "task":
            cur = int(tok[1])
            tasks[cur] = []
        elif tok[0] == "end":
            cur = None
        else:
            if cur is None:
                raise ValueError(f"operation outside a task: {raw!r}")
            tasks[cur].append((tok[0],) + tuple(int(x) for x in tok[1:]))
    if 0 not in tasks:
        raise ValueError("no task 0")
    return Program(tasks, nfut)


# ------------------------------------------------------------ generator

def _delay(rng, zero_weight=3):
    return rng.choice([0] * zero_weight + [1, 2, 3, 4, 5]) * UNIT_MS


def _extra_op(rng, k, spawned, nfut, mark):
    kinds = [("sleep", 40), ("print", 6), ("soon", 4), ("later", 3)]
    if spawned:
        kinds += [("await", 14), ("cancel", 14), ("gather", 12), ("waitfor", 8)]
    if nfut:
        kinds += [("fawait", 12), ("fcb", 5), ("fset", 3), ("fcancel", 2)]
    if k != 0:
        kinds += [("cancelself", 2)]
    kind = rng.choices([n for n, _ in kinds], [w for _, w in kinds])[0]
    if kind == "sleep":
        d = _delay(rng)
        return ("sleepc" if d and rng.random() < 0.5 else "sleep", d)
    if kind in ("print", "soon"):
        return (kind, mark)
    if kind == "later":
        return ("later", mark, _delay(rng, 1))
    if kind in ("await", "cancel"):
        return (kind, rng.choice(spawned))
    if kind == "gather":
        n = rng.randint(1, len(spawned))
        return ("gather", rng.randint(0, 1)) + tuple(rng.sample(spawned, n))
    if kind == "waitfor":
        return ("waitfor", rng.choice(spawned), rng.randint(1, 4) * UNIT_MS)
    if kind == "fset":
        return ("fset", rng.randrange(nfut), rng.randint(0, 99))
    if kind in ("fawait", "fcancel"):
        return (kind, rng.randrange(nfut))
    if kind == "fcb":
        return ("fcb", rng.randrange(nfut), mark)
    return ("cancelself",)


def _setter_ops(rng, nfut):
    ops = []
    for f in range(nfut):
        kind = rng.choices(["fset", "ffail", "fcancel"], [6, 2, 2])[0]
        ops.append(("fset", f, rng.randint(0, 99)) if kind == "fset" else (kind, f))
    for mark in range(rng.randint(1, 4)):
        kind = rng.choices(["sleep", "print", "soon", "later", "again"], [10, 1, 1, 1, 2])[0]
        if kind == "sleep":
            ops.append(("sleep", _delay(rng, 1)))
        elif kind == "later":
            ops.append(("later", 100 + mark, _delay(rng, 1)))
        elif kind == "again":
            ops.append(rng.choice([("fset", rng.randrange(nfut), 1), ("fcancel", rng.randrange(nfut))]))
        else:
            ops.append((kind, 100 + mark))
    rng.shuffle(ops)
    return ops + [("return", 1)]


def generate_candidate(rng):
    n = rng.randint(2, 7)
    nfut = rng.choice([0, 0, 1, 2, 3])
    setter = 1 if nfut else None
    parent = {}
    for k in range(1, n):
        parent[k] = 0 if k == setter else rng.choice([p for p in range(k) if p != setter])
    tasks = {}
    for k in range(n):
        if k == setter:
            tasks[k] = _setter_ops(rng, nfut)
            continue
        kids = [c for c in range(1, n) if parent[c] == k and c != setter]
        order = kids[:]
        rng.shuffle(order)
        steps = ["spawn"] * len(order) + ["extra"] * rng.randint(0, 5)
        rng.shuffle(steps)
        ops, spawned, mark = [], [], k * 10
        for s in steps:
            if s == "spawn":
                c = order.pop()
                ops.append(("spawn", c))
                spawned.append(c)
            else:
                ops.append(_extra_op(rng, k, spawned, nfut, mark))
                mark += 1
        joins = kids[:]
        rng.shuffle(joins)
        ops += [("join", c) for c in joins]
        if k == 0 and setter:
            ops = [("spawn", setter)] + ops + [("join", setter)]
        if k != 0 and rng.random() < 0.2:
            ops.append(("fail",))
        else:
            ops.append(("return", 0 if k == 0 else rng.randint(0, 99)))
        tasks[k] = ops
    return Program(tasks, nfut)


def generate(seed, index=0):
    """A timing-robust program for (seed, index): deterministic."""
    rng = random.Random(f"loopscope-diff:{seed}:{index}")
    for attempt in range(MAX_TRIES):
        prog = generate_candidate(rng)
        ok, _ = check_robust(prog)
        if ok:
            return format_spec(prog, f"seed {seed} index {index} attempt {attempt}")
    raise RuntimeError(f"no robust program found for seed {seed} index {index}")


# ---------------------------------------------------------- interpreter

def _fmt(x):
    if isinstance(x, asyncio.CancelledError):
        return "cancelled"
    if isinstance(x, TimeoutError):
        return "timeout"
    if isinstance(x, BaseException):
        return "error"
    return str(x)


def _fut_outcome(t):
    if t.cancelled():
        return "cancelled"
    exc = t.exception()
    return _fmt(exc) if exc is not None else _fmt(t.result())


async def _outcome(aw):
    try:
        return _fmt(await aw)
    except BaseException as exc:
        return _fmt(exc)


async def _gather_outcome(ts, collect):
    try:
        res = await asyncio.gather(*ts, return_exceptions=collect)
    except BaseException as exc:
        return _fmt(exc)
    return " ".join(_fmt(x) for x in res)


def _complete(fut, how):
    try:
        how(fut)
        return "ok"
    except asyncio.InvalidStateError:
        return "done"


async def _run_task(k, env):
    prog, tasks, futs, say = env["prog"], env["tasks"], env["futs"], env["say"]
    loop = asyncio.get_running_loop()
    say(f"t{k} start")
    exiting = False
    for op in prog.tasks[k]:
        kind = op[0]
        if exiting and kind != "join":
            continue
        if kind == "print":
            say(f"t{k} print {op[1]}")
        elif kind == "sleep":
            try:
                await asyncio.sleep(op[1] / 1000)
                say(f"t{k} sleep {op[1]} -> ok")
            except asyncio.CancelledError:
                say(f"t{k} sleep {op[1]} -> cancelled")
        elif kind == "sleepc":
            try:
                await asyncio.sleep(op[1] / 1000)
                say(f"t{k} sleepc {op[1]} -> ok")
            except asyncio.CancelledError:
                say(f"t{k} sleepc {op[1]} -> cancelled, exiting")
                exiting = True
        elif kind == "spawn":
            say(f"t{k} spawn t{op[1]}")
            tasks[op[1]] = asyncio.create_task(_run_task(op[1], env))
        elif kind == "await":
            say(f"t{k} await t{op[1]} -> {await _outcome(tasks[op[1]])}")
        elif kind == "cancel":
            say(f"t{k} cancel t{op[1]} -> {int(tasks[op[1]].cancel())}")
        elif kind == "gather":
            names = ",".join(f"t{c}" for c in op[2:])
            r = await _gather_outcome([tasks[c] for c in op[2:]], bool(op[1]))
            say(f"t{k} gather{op[1]} {names} -> {r}")
        elif kind == "waitfor":
            r = await _outcome(asyncio.wait_for(tasks[op[1]], op[2] / 1000))
            say(f"t{k} waitfor t{op[1]} {op[2]} -> {r}")
        elif kind == "join":
            if op[1] not in tasks:  # not spawned: this task is exiting early
                continue
            t = tasks[op[1]]
            while not t.done():
                try:
                    await t
                except BaseException:
                    pass
            say(f"t{k} join t{op[1]} -> {_fut_outcome(t)}")
        elif kind == "fset":
            r = _complete(futs[op[1]], lambda f: f.set_result(op[2]))
            say(f"t{k} fset f{op[1]} {op[2]} -> {r}")
        elif kind == "ffail":
            r = _complete(futs[op[1]], lambda f: f.set_exception(Boom()))
            say(f"t{k} ffail f{op[1]} -> {r}")
        elif kind == "fcancel":
            say(f"t{k} fcancel f{op[1]} -> {int(futs[op[1]].cancel())}")
        elif kind == "fawait":
            say(f"t{k} fawait f{op[1]} -> {await _outcome(futs[op[1]])}")
        elif kind == "fcb":
            f, n = op[1], op[2]
            futs[f].add_done_callback(
                lambda fut, f=f, n=n: say(f"cb{n} f{f} -> {_fut_outcome(fut)}"))
            say(f"t{k} fcb f{f} cb{n}")
        elif kind == "soon":
            loop.call_soon(say, f"soon{op[1]}")
            say(f"t{k} soon {op[1]}")
        elif kind == "later":
            loop.call_later(op[2] / 1000, say, f"later{op[1]}")
            say(f"t{k} later {op[1]} {op[2]}")
        elif kind == "cancelself":
            say(f"t{k} cancel self -> {int(asyncio.current_task().cancel())}")
        elif kind == "return":
            say(f"t{k} return {op[1]}")
            return op[1]
        elif kind == "fail":
            say(f"t{k} fail")
            raise Boom()
        else:
            raise ValueError(f"unknown operation {op!r}")
    if exiting:
        say(f"t{k} exit cancelled")
        raise asyncio.CancelledError()
    return 0


async def _main(prog, say):
    loop = asyncio.get_running_loop()
    env = {"prog": prog, "tasks": {}, "say": say,
           "futs": [loop.create_future() for _ in range(prog.nfut)]}
    r = await _run_task(0, env)
    for f in env["futs"]:  # no "exception was never retrieved" noise
        if f.done() and not f.cancelled():
            f.exception()
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    if left:
        raise RuntimeError(f"{len(left)} task(s) still pending at the end")
    return r


def interpret(prog):
    """Run the program with the real asyncio loop; return the printed lines."""
    out = []
    asyncio.run(_main(prog, out.append))
    return out


def interpret_virtual(prog):
    """Run with asyncio on a virtual clock (vloop.py); return (lines, loop)."""
    out = []
    _, loop = vloop.run(_main(prog, out.append))
    return out, loop


# --------------------------------------------------- robustness check

def check_robust(prog):
    """(ok, reason).  See the module docstring."""
    try:
        lines, loop = interpret_virtual(prog)
    except Exception as exc:  # a generator bug: report it loudly
        raise RuntimeError(f"candidate failed under the virtual clock: {exc!r}\n"
                           + format_spec(prog)) from exc
    if loop.time() > MAX_DURATION:
        return False, f"too long ({loop.time():.3f} s)"
    if lines[-1] != "t0 return 0":
        return False, "output after main returned"
    margin = UNIT_MS / 1000 * 0.95
    # A timer matters if it fired, was cancelled close to its deadline, or
    # was still armed when main returned.
    relevant = [r for r in loop.timers
                if r["fired"] or r["cancelled_at"] is None
                or r["cancelled_at"] > r["when"] - margin]
    relevant.sort(key=lambda r: r["when"])
    for a, b in zip(relevant, relevant[1:]):
        gap = b["when"] - a["when"]
        if gap < 1e-7 and a["iter"] == b["iter"]:
            continue
        if gap < margin:
            return False, f"timers {a} and {b} too close"
    return True, ""


def main():
    ap = argparse.ArgumentParser(description="random differential programs")
    ap.add_argument("--seed", type=int, help="print the program for this seed")
    ap.add_argument("--index", type=int, default=0)
    ap.add_argument("--run", metavar="FILE", help="interpret a spec with asyncio")
    ap.add_argument("--virtual-time", action="store_true",
                    help="with --run: use the virtual-clock asyncio loop")
    args = ap.parse_args()
    if args.run:
        with open(args.run) as f:
            prog = parse_spec(f.read())
        lines = interpret_virtual(prog)[0] if args.virtual_time else interpret(prog)
        for line in lines:
            print(line)
        return 0
    if args.seed is None:
        ap.error("give --seed or --run")
    sys.stdout.write(generate(args.seed, args.index))
    return 0


if __name__ == "__main__":
    sys.exit(main())
