#!/usr/bin/env python3
"""asyncio_truth.py -- an asyncio program with known task states, which logs
its own ground truth, for the recorder's tests (generic loop mode) to
compare a trace with.

    asyncio_truth.py --truth PATH [--hold S] [--forever] [--clean-exit] [--uvloop] [--wait-go]
                     [--reuse N]

Sets up the patterns below, prints "ready" when every long-lived task is
parked, runs for S seconds (default 2.0; --forever: until SIGTERM/SIGINT),
then exits 0 with os._exit so that the never-ending tasks (q-get, q-put,
dl-a, dl-b) are still pending at the end (--clean-exit: return from the
loop normally, which cancels them).  Offsets are from "ready":

    q-get, q-put      await Queue.get() of an empty queue / put() of a full one, forever
    dl-a, dl-b        hold lock A / B, then wait for B / A: deadlocked forever
    leaky             awaits a future nothing else references; at +300 ms main
                      drops the task and gc.collect()s it ("Task was destroyed
                      but it is pending!" on stderr, never done)
    fan, fan-0..3     fan gathers fan-i, which sleep 100/200/300/400 ms from creation
    sleeper           asyncio.sleep(10), cancelled by main at +200 ms
    failer            raises ValueError 150 ms after creation, never retrieved
                      ("Task exception was never retrieved" on stderr)
    ev-wait, cond-wait, sem-wait
                      Event.wait(), Condition.wait(), Semaphore(0).acquire(),
                      released at +500 ms
    awaiter, awaited  awaiter awaits the task awaited, which sleeps 400 ms
    exec              run_in_executor(None, time.sleep, 0.3); the default executor has
                      one worker, started before the tasks (so exec parks at once)
    stream-read       reader.read(100) from a local server (task srv-read)
                      that sends at +400 ms
    stream-drain      writer.drain() after 4 MB to a server (task srv-drain)
                      that reads nothing before +400 ms
    plain-fut         awaits loop.create_future(), completed at +500 ms
    blocker           waits for an Event set at +600 ms, then blocks the loop
                      in time.sleep(0.05): a blocking episode in a named task
    renamee           sleeps 700 ms; at +100 ms main renames it "renamed"
                      (Task.set_name): the trace's row follows the name

--reuse N: none of the above.  After "ready", N rounds of 8 tasks r<R>-<I>
that sleep 120 ms, awaited by main, which drops the round's tasks (they
are freed: nothing else refers to them) and makes the next round's at
once, in the same step: CPython's allocator gives a new task, and its
coroutine, the memory of one just freed.  After each round a line
{"ev":"round","task":"main","round":R,"run_delay":NS,"t":T}, NS the main
thread's run delay over the round.

Truth: one JSON object a line, flushed at once, times ("t") from
time.monotonic_ns() (CLOCK_MONOTONIC):

    {"ev":"start","pid":P,"python":sys.version,"loop":"module.Class","t":T}  first line
    {"ev":"create","task":NAME,"id":id(task),"coro":id(coro),"t":T}
                                                       every task, from the task factory
                                                       (ids are reused once a task is freed)
    {"ev":"wait","task":NAME,"on":ON,"t":T}            just before the task's await; ON is
        lock event condition semaphore queue_get queue_put sleep task gather
        future executor stream_read stream_drain
    {"ev":"done","task":NAME,"id":I,"state":"finished"|"failed"|"cancelled","t":T}
    {"ev":"ready","task":"main","t":T}                 every long-lived task parked
    {"ev":"act","task":"main","do":WHAT,"target":NAME,"t":T}   main cancels, drops, releases,
                                                       renames ("to": the new name)
    {"ev":"collected","task":"main","t":T}             after gc.collect() of leaky
    {"ev":"block","task":"blocker","t0":T,"t1":T}      around blocker's time.sleep(0.05)
    {"ev":"end","task":"main","t":T,"run_delay":NS}    last line; NS: the main thread's
                                                       time runnable but waiting for a CPU
                                                       (schedstat), all run long

Every task is logged, asyncio's own too: start_server and each accepted
connection create short-lived unnamed tasks ("Task-N"; "None" on 3.13.0,
whose create_task gives a factory's task the name str(None); uvloop
creates none).  The main task is named "main"; its waits are logged from
the "ready" future on, not its setup (start_server, open_connection).  A
create line is written once the task has its name (create_task names a
task after the factory returns), before any other line, with the
factory's time.  The truth keeps no reference to any task.
"""
import argparse
import asyncio
import concurrent.futures
import gc
import json
import os
import signal
import socket
import sys
import time
import weakref

now = time.monotonic_ns
out = None
created = []      # (weakref to task, id, coroutine's id, t, name at creation) not yet logged
waited = set()    # (task name, on) logged so far
parked = None     # (set of (name, on), future main waits on for "ready")


def log(ev, **kw):
    while created:
        ref, tid, cid, t, name0 = created.pop(0)
        task = ref()
        write({"ev": "create", "task": task.get_name() if task else name0, "id": tid,
               "coro": cid, "t": t})
    if ev is not None:
        write({"ev": ev, **kw})


def write(rec):
    out.write(json.dumps(rec) + "\n")
    out.flush()


def wait(on):   # the current task is about to await on ON: call just before
    name = asyncio.current_task().get_name()
    log("wait", task=name, on=on, t=now())
    waited.add((name, on))
    if parked and parked[0] <= waited and not parked[1].done():
        parked[1].set_result(None)   # main runs after this task has parked


def on_done(task):
    if task.cancelled():
        state = "cancelled"
    elif task._exception is not None:   # task.exception() would mark it retrieved
        state = "failed"
    else:
        state = "finished"
    log("done", task=task.get_name(), id=id(task), state=state, t=now())


def task_factory(loop, coro, **kw):
    task = asyncio.Task(coro, loop=loop, **kw)
    created.append((weakref.ref(task), id(task), id(coro), now(), task.get_name()))
    loop.call_soon(log, None)
    task.add_done_callback(on_done)
    return task


# ---- the patterns ----------------------------------------------------------

async def q_get(q):
    wait("queue_get")
    await q.get()


async def q_put(q):
    q.put_nowait(0)
    wait("queue_put")
    await q.put(1)


async def deadlock(first, second):
    async with first:
        wait("sleep")
        await asyncio.sleep(0.02)      # both take their first lock
        wait("lock")
        async with second:  # AT-DEADLOCK
            pass


async def leaky():
    fut = asyncio.get_running_loop().create_future()
    wait("future")
    await fut


async def nap(seconds):
    wait("sleep")
    await asyncio.sleep(seconds)


async def fan(keep):
    kids = [asyncio.get_running_loop().create_task(nap(0.1 * (i + 1)), name=f"fan-{i}")
            for i in range(4)]
    keep.extend(kids)
    wait("gather")
    await asyncio.gather(*kids)


async def failer():
    await nap(0.15)
    raise ValueError("failer failed")


async def ev_wait(ev):
    wait("event")
    await ev.wait()


async def cond_wait(cond):
    async with cond:
        wait("condition")
        await cond.wait()


async def sem_wait(sem):
    wait("semaphore")
    await sem.acquire()


async def awaiter(other):
    wait("task")
    await other


async def executor():
    wait("executor")
    await asyncio.get_running_loop().run_in_executor(None, time.sleep, 0.3)


async def stream_read(reader, writer):
    wait("stream_read")
    await reader.read(100)
    writer.close()


DRAIN_BYTES = 4 << 20


async def stream_drain(reader, writer):
    writer.transport.set_write_buffer_limits(high=1)
    writer.write(b"x" * DRAIN_BYTES)
    wait("stream_drain")
    await writer.drain()
    writer.close()


async def srv_read(reader, writer, release):
    wait("event")
    await release.wait()
    writer.write(b"hello")
    writer.close()


async def srv_drain(reader, writer, release):
    wait("event")
    await release.wait()
    wait("stream_read")
    await reader.readexactly(DRAIN_BYTES)
    writer.close()


async def blocker(go):
    wait("event")
    await go.wait()
    t0 = now()
    time.sleep(0.05)                # blocks the loop: a blocking episode in this task
    log("block", task="blocker", t0=t0, t1=now())


async def plain_fut(fut):
    wait("future")
    await fut


async def reuse(rounds):
    loop = asyncio.get_running_loop()
    batch = []
    for r in range(rounds):
        d0 = run_delay()
        batch.clear()               # the last round's tasks are freed here ...
        batch.extend(loop.create_task(nap(0.12), name=f"r{r}-{i}") for i in range(8))
        for t in batch:             # ... and the next made at their addresses
            await t
        del t
        await asyncio.sleep(0)      # (once their done callbacks have run)
        log("round", task="main", round=r, run_delay=run_delay() - d0, t=now())
    batch.clear()
    await asyncio.sleep(0.05)       # the last round's freed before the exit


# ---- main ------------------------------------------------------------------

async def main(args):
    global parked
    me = asyncio.current_task()
    me.set_name("main")
    loop = asyncio.get_running_loop()
    if args.wait_go:                # a tracer attaches first: SIGUSR2 says go
        go = asyncio.Event()
        loop.add_signal_handler(signal.SIGUSR2, go.set)
        print("waiting", flush=True)
        await go.wait()
    if args.reuse:
        log("ready", task="main", t=now())
        print("ready", flush=True)
        await reuse(args.reuse)
        log_end()
        sys.stdout.flush()
        os._exit(0)
    # exec's run_in_executor must park it at once: the first call would
    # start the executor's thread and wait for it to run (beside CPU hogs,
    # tens of ms after exec logged its wait).  One worker, started now.
    loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=1))
    await loop.run_in_executor(None, int)
    keep = []       # main's references: every task but leaky (dropped) and failer

    def spawn(coro, name, hold=True):
        task = loop.create_task(coro, name=name)
        if hold:
            keep.append(task)
        return task

    release = asyncio.Event()      # servers: send / read at +400 ms
    servers = []
    for name, fn in (("srv-read", srv_read), ("srv-drain", srv_drain)):
        def on_conn(r, w, name=name, fn=fn):
            spawn(fn(r, w, release), name)
        servers.append(await asyncio.start_server(on_conn, "127.0.0.1", 0))
    # small kernel buffers (the listener's pass to the accepted socket), so
    # that the kernel cannot take all of stream-drain's 4 MB
    servers[1].sockets[0].setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    conns = [await asyncio.open_connection(*s.sockets[0].getsockname()[:2]) for s in servers]
    conns[1][1].get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)

    q, q2 = asyncio.Queue(), asyncio.Queue(maxsize=1)
    lock_a, lock_b = asyncio.Lock(), asyncio.Lock()
    ev, cond, sem = asyncio.Event(), asyncio.Condition(), asyncio.Semaphore(0)
    fut = loop.create_future()

    spawn(q_get(q), "q-get")
    spawn(q_put(q2), "q-put")
    spawn(deadlock(lock_a, lock_b), "dl-a")
    spawn(deadlock(lock_b, lock_a), "dl-b")
    leak = spawn(leaky(), "leaky", hold=False)
    spawn(fan(keep), "fan")
    sleeper = spawn(nap(10), "sleeper")
    spawn(failer(), "failer", hold=False)
    spawn(ev_wait(ev), "ev-wait")
    spawn(cond_wait(cond), "cond-wait")
    spawn(sem_wait(sem), "sem-wait")
    spawn(awaiter(spawn(nap(0.4), "awaited")), "awaiter")
    spawn(executor(), "exec")
    spawn(stream_read(*conns[0]), "stream-read")
    spawn(stream_drain(*conns[1]), "stream-drain")
    spawn(plain_fut(fut), "plain-fut")
    block_go = asyncio.Event()
    spawn(blocker(block_go), "blocker")
    renamee = spawn(nap(0.7), "renamee")

    expect = {("q-get", "queue_get"), ("q-put", "queue_put"), ("dl-a", "lock"),
              ("dl-b", "lock"), ("leaky", "future"), ("fan", "gather"),
              ("sleeper", "sleep"), ("failer", "sleep"), ("ev-wait", "event"),
              ("cond-wait", "condition"), ("sem-wait", "semaphore"),
              ("awaiter", "task"), ("awaited", "sleep"), ("exec", "executor"),
              ("stream-read", "stream_read"), ("stream-drain", "stream_drain"),
              ("srv-read", "event"), ("srv-drain", "event"), ("plain-fut", "future"),
              ("blocker", "event"), ("renamee", "sleep")}
    expect |= {(f"fan-{i}", "sleep") for i in range(4)}
    parked = (expect, loop.create_future())
    wait("future")
    await parked[1]
    ready = now()
    log("ready", task="main", t=ready)
    print("ready", flush=True)

    def act(do, target, **kw):
        log("act", task="main", do=do, target=target, t=now(), **kw)

    def rename():
        act("rename", "renamee", to="renamed")
        renamee.set_name("renamed")

    def cancel_sleeper():
        act("cancel", "sleeper")
        sleeper.cancel()

    def drop_leaky():
        nonlocal leak
        act("drop", "leaky")
        leak = None
        gc.collect()
        log("collected", task="main", t=now())

    def release_streams():
        act("set", "srv-read srv-drain")
        release.set()

    async def release_waiters():
        act("set", "ev-wait")
        ev.set()
        act("notify", "cond-wait")
        async with cond:
            cond.notify_all()
        act("release", "sem-wait")
        sem.release()
        act("set_result", "plain-fut")
        fut.set_result(None)

    def release_blocker():
        act("set", "blocker")
        block_go.set()

    schedule = [(0.1, rename), (0.2, cancel_sleeper), (0.3, drop_leaky), (0.4, release_streams),
                (0.5, release_waiters), (0.6, release_blocker)]
    for at, action in schedule:
        if not args.forever and at >= args.hold:
            break
        wait("sleep")
        await asyncio.sleep(max(0, ready + at * 1e9 - now()) / 1e9)
        r = action()
        if r is not None:
            await r

    if args.forever:
        stop = loop.create_future()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
        wait("future")
        await stop
    else:
        wait("sleep")
        await asyncio.sleep(max(0, ready + args.hold * 1e9 - now()) / 1e9)
    gc.collect()
    if not args.clean_exit:
        log_end()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    for s in servers:
        s.close()


def run(args):
    global out
    out = open(args.truth, "w")
    factory = None
    if args.uvloop:
        import uvloop
        factory = uvloop.new_event_loop
        if not hasattr(asyncio, "Runner"):
            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    if hasattr(asyncio, "Runner"):       # 3.11+
        with asyncio.Runner(loop_factory=factory) as runner:
            loop = runner.get_loop()
            start(loop)
            runner.run(main(args))
    else:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        start(loop)
        try:
            loop.run_until_complete(main(args))
        finally:      # what asyncio.run does on the way out: cancel what is left
            pending = asyncio.all_tasks(loop)
            for t in pending:
                t.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            asyncio.set_event_loop(None)
            loop.close()
    log_end()


def run_delay():
    """The main thread's time runnable but waiting for a CPU (schedstat), ns."""
    with open(f"/proc/self/task/{os.getpid()}/schedstat") as f:
        return int(f.read().split()[1])


def log_end():
    """The last line, with the main thread's run delay."""
    log("end", task="main", t=now(), run_delay=run_delay())


def start(loop):
    write({"ev": "start", "pid": os.getpid(), "python": sys.version,
           "loop": type(loop).__module__ + "." + type(loop).__name__, "t": now()})
    loop.set_task_factory(task_factory)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description="asyncio target with logged ground truth")
    p.add_argument("--truth", required=True, help="JSON-lines truth file to write")
    p.add_argument("--hold", type=float, default=2.0, help="seconds to run after ready")
    p.add_argument("--forever", action="store_true", help="run until SIGTERM/SIGINT")
    p.add_argument("--clean-exit", action="store_true", help="return normally, cancelling what is left")
    p.add_argument("--uvloop", action="store_true", help="run on uvloop")
    p.add_argument("--wait-go", action="store_true",
                   help='print "waiting" and make no task before SIGUSR2')
    p.add_argument("--reuse", type=int, default=0, metavar="N",
                   help="N rounds of tasks made where the last round's were freed")
    run(p.parse_args())
