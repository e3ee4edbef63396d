#!/usr/bin/env python3
"""pytasks_hostile_target.py -- an asyncio program that corrupts its own
asyncio objects with ctypes, for the hostile test of the task census
(tests/tracer/test_pytasks_hostile.py; tracer/pystack_tasks.c).

    pytasks_hostile_target.py SCENARIO [--many N] [--seconds S] [--seed K]

Sets up the healthy tasks below, then the scenario's victims, waits until
every task is parked (checked on asyncio's own objects), disables the
garbage collector (it would traverse what was corrupted), corrupts the
victims, and prints one JSON line: {"version", "healthy": {name: id},
"victims": {label: {...}}, ...}.  Then it stays parked until killed: the
interpreter never touches a corrupted object again (nothing wakes a
victim; SIGKILL ends it, so no finalizer runs).

Every write is at id(obj) + an offset of tracer/pystack_tasks.c's
pyt_layout for this minor version (LAYOUT below), after reading the field
back and checking it holds what CPython says it holds (the task's
coroutine, name, waiter, state; a frame's stack top = coro.cr_await; 3.14+:
the thread state's running task and task list, each list walked from its
head and back, every node's prev, _asyncio's debug offsets): a wrong offset
fails here ("layout check failed", exit 3) instead of corrupting something
else.

3.14+ keeps no task WeakSet: each Task is linked through its task_node into
its thread's list (the head in the thread state; the tasks of threads that
ended in the interpreter's list), new tasks at the tail.  The victims are
made after the healthy tasks (so they come after them in the loop thread's
list; checked), and a list is corrupted only once nothing will be added to
or removed from it (the interpreter would follow the corrupted links).

Healthy tasks (every scenario):
    main        awaits a bare future (the task asyncio.run made)
    ok-sleep    asyncio.sleep
    ok-holder   holds lock L (`async with`), waits for an event
    ok-lock     waits for lock L
    ok-awaiter  awaits the task ok-sleep

Scenarios (victims):
    cycles      ac-1 / ac-2 await each other (a real await cycle, through a
                box); cyc-first: outer -> mid -> inner -> future, inner's
                stack top made to point at outer (the chain comes back to
                its first coroutine); cyc-mid: a -> b -> c -> d, d's stack
                top -> b (a loop that misses the first); cyc-self: x -> y,
                y's stack top -> y
    names       task_name made an int (2**100, -7, 7), a bytes, a pointer
                into garbage, an unmapped address, a freed object; a str
                whose length claims 2**40, one 2**30 (the bound: 4095
                characters read past a short str), one whose kind is 3; set
                legitimately: lone surrogates, NUL and control characters,
                a 100 000-character name
    fields      task_coro -> the task itself / garbage / a freed object / NULL /
                a finished coroutine with fut_waiter -> the task itself, an
                int, garbage; fut_state = 7; num_cancels -5 and 2**31-1 (3.11+)
    many        N tasks (default 200 000, created for at most --seconds,
                at least 70 000) parked on one future: more than a census reads
    (3.10-3.13 only: setmask ... entries, the task WeakSet's; 3.14+ has none)
    setmask     asyncio.tasks' task WeakSet swapped for a copy whose set's
                mask is 1000 (not a power of two)
    setmask40   ... whose mask is 2**40-1 (a power of two minus one: the
                slots are read up to PYT_SET_MAX, past the real table)
    settable    ... whose set's table pointer is an unmapped address
    setnotset   ... whose data is a list, not a set
    setint      ... for an int
    setbigdict  ... whose `data` comes after 100 000 other attributes
    curdict     asyncio.tasks' current-task dict swapped for one whose keys
                claim 2**40 entries (3.11+: an index of 2**23 bytes; 3.10: a
                size of 2**20)
    entries     the real task set also holds weakrefs to non-tasks (a
                Future, an instance, a dead weakref's None), an int; 3.12+:
                the eager set too
    forged      64 weakrefs in the real task set whose referent is made a
                forged Task (the real Task type, random fields: a forged
                coroutine and frame, forged str names, pointers to itself,
                garbage) -- a seeded fuzz of everything read from a task;
                3.14+: the 64 linked into the loop thread's list after a
                real task (forged-anchor), the next of some of the last 16
                made itself, another, the anchor, garbage, unmapped, NULL;
                forged frames' stackpointers pointers (in the frame, past
                it, unaligned, garbage), f_executable tagged
    stack       st-huge / st-neg / st-edge: the task coroutine's frame stack
                top made 100000 / -5 / 4095 (3.14+: the stackpointer that
                many slots above localsplus); deep-1000: a chain of 1000
                coroutines (under LS_PYT_WALK); deep-5000: 5000 (beyond
                it); 3.14+ also: st-null / st-odd the stackpointer NULL /
                3 bytes off; st-low yf_depth slots up (the awaited object is
                then the first local, the int 3); st-tag the awaited
                object's stackref tagged (bit 0); 3.15 st-sent: the value
                sent (the slot above the awaited object) garbage
    lists       3.14+: after the healthy tasks, l-sub (a Task subclass made
                in Python) and l-skip-1 -> an int's digits -> l-skip-2 ->
                a Future subclass's slot -> l-skip-3 (non-tasks at +152 in
                the list); threads of their own loops: tn-ok, tn-bad with
                tn-bad's next NULL, tu-* unmapped, tg-* garbage; th-1, th-2
                whose thread state's head is garbage (done last); threads
                that ended leaving o-1 / o-2, o-bad pending (the
                interpreter's list), o-bad -> an int's digits -> unmapped;
                the running task of tn's thread state made tn-ok, of th's
                th-1 (in no list), of others unmapped, garbage, an int
    lself       3.14+: l-a, l-self, whose next is itself
    lback       3.14+: l-a, l-b, l-c, l-c -> l-a
    lcross      3.14+: l-a -> x-1 of another thread's list (x-1, x-2, its
                head, x-1...)
    linterp     3.14+: a thread ended leaving o-1, o-2; o-2 -> o-1 (the
                interpreter's list, which a census reads first)
    lflip       3.14+: f-1..f-4; a thread flips f-1's next every 0.2 ms
                (f-2, f-3, NULL, garbage, unmapped, itself), another runs a
                loop making and ending 20 tasks a millisecond
    dbg         3.14+: _asyncio's .AsyncioDebug offsets rewritten: --seed 0
                the list node's offset 0, 1 the task's size 2**40, else
                random offsets within the census's bounds
    shared      --many tasks whose task_coro is the outermost coroutine of
                one real chain of 1000, or a FutureIter whose future is
                itself (a census's time, not its memory)
    exit        --many tasks 8 coroutines deep (for the process-exit test:
                a census that takes a while)
"""
import argparse
import asyncio
import ctypes
import gc
import json
import os
import random
import struct
import sys
import threading
import time
import traceback
import types
import weakref

FOREVER = 3600
V = sys.version_info[:2]

# tracer/pystack_tasks.c, pyt_layout: TaskObj and coroutine/frame offsets
LAYOUT = {
    10: dict(t_state=88, t_waiter=152, t_coro=160, t_name=168, t_ncancels=None,
             cr_frame=16, cr_state=None, f_valuestack=64, f_stackdepth=80, f_state=108),
    11: dict(t_state=88, t_waiter=128, t_coro=136, t_name=144, t_ncancels=168,
             cr_frame=80, cr_state=75, f_stacktop=64, f_localsplus=72),
    12: dict(t_state=88, t_waiter=128, t_coro=136, t_name=144, t_ncancels=168,
             cr_frame=72, cr_state=67, f_stacktop=64, f_localsplus=72),
    13: dict(t_state=96, t_waiter=112, t_coro=120, t_name=128, t_ncancels=104,
             cr_frame=72, cr_state=67, f_stacktop=64, f_localsplus=72),
    # 3.14+: the tasks in lists (task_node, a thread state's and the
    # interpreter's heads), the frame's stack top a pointer (stackpointer),
    # the awaited object yf_depth slots below it (3.15: the value sent
    # above it), susp: the suspended frame states
    14: dict(t_state=104, t_waiter=120, t_coro=128, t_name=136, t_ncancels=112, t_node=152,
             cr_frame=72, cr_state=67, f_stackptr=64, f_localsplus=80, yf_depth=1,
             susp=(-2, -1), ts_running=872, ts_head=880, interp_head=0x2a80),
    15: dict(t_state=104, t_waiter=120, t_coro=128, t_name=136, t_ncancels=112, t_node=152,
             cr_frame=72, cr_state=67, f_stackptr=64, f_localsplus=80, yf_depth=2,
             susp=(1, 3), ts_running=1032, ts_head=1048, interp_head=0x2a68),
}
L = LAYOUT[V[1]] if V[0] == 3 and V[1] in LAYOUT else None
LISTS = L is not None and "t_node" in L     # 3.14+: no task WeakSet
MAIN_TS = 0                                 # the main thread's thread state (3.14+)
KEEP = []               # everything a corrupted object points at, and the victims
UNMAPPED = 0x00007ead00000000       # canonical, never mapped here (checked)


def die(msg):
    print(json.dumps({"error": msg}), flush=True)
    os._exit(3)


def rd64(a):
    return ctypes.c_uint64.from_address(a).value


def wr64(a, v):
    ctypes.c_uint64.from_address(a).value = v & (2 ** 64 - 1)


def rd32(a):
    return ctypes.c_int32.from_address(a).value


def wr32(a, v):
    ctypes.c_int32.from_address(a).value = v


def rd8(a):
    return ctypes.c_int8.from_address(a).value


def expect(got, want, what):
    if got != want:
        die(f"layout check failed: {what}: {got:#x} != {want:#x}")


def mapped(addr):
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= addr < hi:
                return True
    return False


def junk(n=4096, byte=0xAB):
    """The address of n bytes of garbage (kept)."""
    b = ctypes.create_string_buffer(bytes([byte]) * n, n)
    KEEP.append(b)
    return ctypes.addressof(b)


def freed_addr():
    """The address of an object that was freed (its memory back to the
    allocator, maybe reused)."""
    class Gone:
        pass
    g = Gone()
    a = id(g)
    del g
    return a


# ---------------------------------------------------------------- checked field access

def task_field(task, field, want):
    """The address of task's field, after checking it holds want."""
    a = id(task) + L[field]
    expect(rd64(a) if field != "t_state" else rd32(a), want, f"{task.get_name()}: {field}")
    return a


def set_coro(task, value):
    wr64(task_field(task, "t_coro", id(task.get_coro())), value)


def set_waiter(task, value):
    wr64(task_field(task, "t_waiter", id(task._fut_waiter)), value)


def set_name_ptr(task, value):
    wr64(task_field(task, "t_name", id(task.get_name())), value)


def set_state(task, value):
    wr32(task_field(task, "t_state", 0), value)


def top_slot(coro):
    """The address of the stack slot that holds what a suspended coroutine
    awaits (the value _PyGen_yf returns), checked against cr_await."""
    aw = coro.cr_await
    if aw is None:
        die(f"{coro!r} awaits nothing")
    if V[1] == 10:
        fr = rd64(id(coro) + L["cr_frame"])
        expect(fr, id(coro.cr_frame), "cr_frame")
        depth = rd32(fr + L["f_stackdepth"])
        slot = rd64(fr + L["f_valuestack"]) + 8 * (depth - 1)
    elif LISTS:
        # 3.14+: stackpointer, a pointer past the top slot; the awaited
        # object yf_depth slots below it; the slots are _PyStackRefs
        st = rd8(id(coro) + L["cr_state"])
        lo, hi = L["susp"]
        if not lo <= st <= hi:
            die(f"layout check failed: cr_frame_state {st}")
        lp = id(coro) + L["cr_frame"] + L["f_localsplus"]
        sp = rd64(id(coro) + L["cr_frame"] + L["f_stackptr"])
        if not lp + 8 * L["yf_depth"] <= sp < lp + 8 * 4096 or (sp - lp) % 8:
            die(f"layout check failed: stackpointer {sp:#x}, localsplus {lp:#x}")
        slot = sp - 8 * L["yf_depth"]
        expect(rd64(slot) & ~7, id(aw), "the stack slot of the awaited object (cr_await)")
        return slot
    else:
        st = rd8(id(coro) + L["cr_state"])
        if not -2 <= st <= -1:
            die(f"layout check failed: cr_frame_state {st}")
        fr = id(coro) + L["cr_frame"]
        top = rd32(fr + L["f_stacktop"])
        slot = fr + L["f_localsplus"] + 8 * (top - 1)
    expect(rd64(slot), id(aw), "the stack top (cr_await)")
    return slot


def stack_count(coro):
    """The address of the frame's stack count (3.10 f_stackdepth, 3.11-3.13
    stacktop; 3.14+ the stackpointer), checked: the top slot is at count - 1
    (the awaited object's slot below the stackpointer)."""
    top_slot(coro)
    if V[1] == 10:
        return rd64(id(coro) + L["cr_frame"]) + L["f_stackdepth"]
    if LISTS:
        return id(coro) + L["cr_frame"] + L["f_stackptr"]
    return id(coro) + L["cr_frame"] + L["f_stacktop"]


def set_stack_top(coro, n):
    """The frame's stack made n slots high (3.14+: the stackpointer at
    localsplus + n slots, whatever that is)."""
    a = stack_count(coro)
    if LISTS:
        wr64(a, id(coro) + L["cr_frame"] + L["f_localsplus"] + 8 * n)
    else:
        wr32(a, n)


# ---------------------------------------------------------------- 3.14+: the task lists

def tstate():
    """This thread's thread state (_PyThreadStateImpl)."""
    f = ctypes.pythonapi.PyThreadState_Get
    f.restype = ctypes.c_void_p
    return f()


def interp_head():
    f = ctypes.pythonapi.PyInterpreterState_Get
    f.restype = ctypes.c_void_p
    return f() + L["interp_head"]


def node(task):
    return id(task) + L["t_node"]


def walk(head, what):
    """The tasks' addresses in the list at head (task_node.next from the
    head back to it), each node's prev checked."""
    out, prev, n = [], head, rd64(head)
    while n != head:
        if len(out) > 1000000 or not n:
            die(f"layout check failed: {what}: the list does not come back to its head")
        expect(rd64(n + 8), prev, f"{what}: a node's prev")
        out.append(n - L["t_node"])
        prev, n = n, rd64(n)
    expect(rd64(head + 8), prev, f"{what}: the head's prev")
    return out


def check_tail(head, tasks, what):
    """tasks are the last of the list at head, in this order."""
    got = walk(head, what)[-len(tasks):]
    if got != [id(t) for t in tasks]:
        die(f"layout check failed: {what}: the list's tail {[hex(a) for a in got]} is not "
            f"{[t.get_name() for t in tasks]}")


def set_next(task, value, want=None):
    """task's task_node.next made value, after checking it holds want (the
    next node, or the head)."""
    a = node(task)
    if want is not None:
        expect(rd64(a), want, f"{task.get_name()}: task_node.next")
    wr64(a, value)


def side_thread(names, end=False):
    """A thread with an event loop of its own (so a task list of its own):
    tasks named names, each awaiting a future of that loop, parked; then the
    thread blocks for good (end: it returns, its tasks still pending: they
    go to the interpreter's list).  {ts, tasks, fut, head}."""
    res = {}
    done = threading.Event()

    def run():
        try:
            lp = asyncio.new_event_loop()
            res["ts"] = tstate()

            async def setup():
                fut = lp.create_future()
                ts = [asyncio.create_task(fut_body(fut), name=n) for n in names]
                await settle(ts)
                return fut, ts
            res["fut"], res["tasks"] = lp.run_until_complete(setup())
            KEEP.extend([lp, res["fut"], *res["tasks"]])
            expect(rd64(res["ts"] + L["ts_running"]), 0, "no running task")
            res["head"] = res["ts"] + L["ts_head"]
            check_tail(res["head"], res["tasks"], f"thread of {names}")
        except BaseException:
            traceback.print_exc()
            res["err"] = True
        done.set()
        if not end:
            threading.Event().wait()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    if not done.wait(60) or "err" in res:
        die(f"the thread of {names} failed (stderr)")
    if end:
        th.join()
        del res["ts"], res["head"]
    return res


# ---------------------------------------------------------------- healthy tasks

async def sleep_body():
    await asyncio.sleep(FOREVER)


async def holder_body(lock, ev):
    async with lock:
        await ev.wait()


async def lock_body(lock):
    async with lock:
        pass


async def awaiter_body(t):
    await t


async def fut_body(fut):
    await fut


async def healthy():
    loop = asyncio.get_running_loop()
    lock, ev = asyncio.Lock(), asyncio.Event()
    s = asyncio.create_task(sleep_body(), name="ok-sleep")
    h = asyncio.create_task(holder_body(lock, ev), name="ok-holder")
    for _ in range(1000):
        if lock.locked():
            break
        await asyncio.sleep(0)
    t = [s, h, asyncio.create_task(lock_body(lock), name="ok-lock"),
         asyncio.create_task(awaiter_body(s), name="ok-awaiter")]
    KEEP.extend([lock, ev, *t])
    for _ in range(1000):
        if lock._waiters:
            break
        await asyncio.sleep(0)
    else:
        die("the healthy tasks did not park")
    return {x.get_name(): hex(id(x)) for x in t}


async def settle(tasks, n=20):
    """Until every task of tasks is parked on a future."""
    for _ in range(100000):
        if all(x._fut_waiter is not None for x in tasks):
            break
        await asyncio.sleep(0)
    else:
        die("victims did not park: " + ", ".join(x.get_name() for x in tasks
                                                 if x._fut_waiter is None))
    for _ in range(n):
        await asyncio.sleep(0)


# ---------------------------------------------------------------- scenarios

async def chain(n, fut):
    """n coroutines (this one included) down to `await fut`."""
    if n > 1:
        await chain(n - 1, fut)  # AT-CHAIN
    else:
        await fut  # AT-CHAIN-END


def coro_at(coro, depth):
    """The coroutine depth levels down coro's await chain."""
    for _ in range(depth):
        coro = coro.cr_await
    return coro


async def box_body(box, key):
    await box[key]


async def sc_cycles(loop, out):
    box = {}
    box["ac-2"] = asyncio.create_task(box_body(box, "ac-1"), name="ac-2")
    box["ac-1"] = asyncio.create_task(box_body(box, "ac-2"), name="ac-1")
    fut = loop.create_future()
    spec = {"cyc-first": (3, 2, 0), "cyc-mid": (4, 3, 1), "cyc-self": (2, 1, 1)}
    vic = {n: asyncio.create_task(chain(k, fut), name=n) for n, (k, _, _) in spec.items()}
    ts = [*box.values(), *vic.values()]
    KEEP.extend([fut, *ts])
    await settle(ts)
    for n, (k, frm, to) in spec.items():
        c = vic[n].get_coro()
        wr64(top_slot(coro_at(c, frm)), id(coro_at(c, to)))
    for n, t in {**box, **vic}.items():
        out[n] = {"id": hex(id(t)), "fut": hex(id(fut))}


async def sc_names(loop, out):
    fut = loop.create_future()
    big, neg, seven, byt = 2 ** 100, -7 - len(sys.argv), 7, "bytes-name".encode()
    s40 = "".join(["name-len-2**40"])       # fresh objects: theirs alone
    s30 = "".join(["name-len-2**30"])
    sk3 = "".join(["name-kind-3"])
    wr64(id(s40) + 16, 2 ** 40)             # PyASCIIObject.length
    wr64(id(s30) + 16, 2 ** 30)
    st = ctypes.c_uint32.from_address(id(sk3) + 32)     # .state: kind bits 2-4
    st.value = (st.value & ~(7 << 2)) | (3 << 2)
    garbage = junk()
    KEEP.extend([fut, big, neg, seven, byt, s40, s30, sk3])
    ptrs = {"n-int-huge": id(big), "n-int-neg": id(neg), "n-int-7": id(seven),
            "n-bytes": id(byt), "n-garbage": garbage + 64, "n-unmapped": UNMAPPED,
            "n-freed": freed_addr(), "n-len40": id(s40), "n-len30": id(s30), "n-kind3": id(sk3),
            "n-null": 0}
    legit = {"n-surrogates": "sur\ud800rog\udfffate\x00nul\x01\x1b[2J\x7f\x9b\u202eend",
             "n-long": "\U0001F600" * 100000}
    vic = {n: asyncio.create_task(fut_body(fut), name=n) for n in [*ptrs, *legit]}
    KEEP.extend(vic.values())
    await settle(list(vic.values()))
    for n, t in vic.items():
        if n in legit:
            t.set_name(legit[n])
            out[n] = {"id": hex(id(t)), "name": legit[n].encode("utf-8", "surrogatepass").hex()}
        else:
            set_name_ptr(t, ptrs[n])
            out[n] = {"id": hex(id(t)), "ptr": hex(ptrs[n])}


async def sc_fields(loop, out):
    fut = loop.create_future()

    async def done():
        return 1
    fin = done()
    try:
        fin.send(None)
    except StopIteration:
        pass
    garbage = junk()
    num = 12345678901234
    KEEP.extend([fut, fin, num])
    names = ["f-coro-self", "f-coro-garbage", "f-coro-freed", "f-coro-null", "f-wait-self",
             "f-wait-int", "f-wait-garbage", "f-state-7", "f-state-neg"]
    if L["t_ncancels"] is not None:
        names += ["f-cancels-neg", "f-cancels-max"]
    vic = {n: asyncio.create_task(fut_body(fut), name=n) for n in names}
    KEEP.extend(vic.values())
    await settle(list(vic.values()))
    for n, t in vic.items():
        out[n] = {"id": hex(id(t)), "fut": hex(id(fut))}
    set_coro(vic["f-coro-self"], id(vic["f-coro-self"]))
    set_coro(vic["f-coro-garbage"], garbage + 128)
    out["f-coro-garbage"]["ptr"] = hex(garbage + 128)
    set_coro(vic["f-coro-freed"], freed_addr())
    set_coro(vic["f-coro-null"], 0)
    for n, w in (("f-wait-self", id(vic["f-wait-self"])), ("f-wait-int", id(num)),
                 ("f-wait-garbage", garbage + 256)):
        set_coro(vic[n], id(fin))           # its chain gives nothing: the waiter decides
        set_waiter(vic[n], w)
        out[n]["ptr"] = hex(w)
    set_state(vic["f-state-7"], 7)
    set_state(vic["f-state-neg"], -1)
    if "f-cancels-neg" in vic:
        for n, v in (("f-cancels-neg", -5), ("f-cancels-max", 2 ** 31 - 1)):
            a = id(vic[n]) + L["t_ncancels"]
            expect(rd32(a), 0, "num_cancels_requested")
            wr32(a, v)


async def sc_many(loop, out, n, seconds, depth=1):
    fut = loop.create_future()
    KEEP.append(fut)
    t0 = time.monotonic()
    made = 0
    while made < n and time.monotonic() - t0 < seconds:
        k = min(5000, n - made)
        KEEP.extend(asyncio.create_task(chain(depth, fut)) for _ in range(k))
        made += k
        await asyncio.sleep(0)
    for _ in range(10):
        await asyncio.sleep(0)
    if len(fut._callbacks) < made:
        die(f"only {len(fut._callbacks)} of {made} tasks parked")
    out["many"] = {"n": made, "fut": hex(id(fut)), "seconds": round(time.monotonic() - t0, 2)}


def task_weakset():
    """asyncio.tasks' WeakSet of the tasks (the one the census reads)."""
    return asyncio.tasks._scheduled_tasks if V[1] >= 12 else asyncio.tasks._all_tasks


def swap_weakset(data):
    """A WeakSet whose data is data, in asyncio.tasks' module dict where the
    census looks (the C module keeps its own: the interpreter never sees
    this one)."""
    ws = weakref.WeakSet()
    ws.data = data
    KEEP.extend([ws, data])
    if V[1] >= 12:
        asyncio.tasks._scheduled_tasks = ws
    else:
        asyncio.tasks._all_tasks = ws
    return ws


async def sc_set(loop, out, how):
    # the healthy tasks' weakrefs, in a set of its own
    data = set(weakref.ref(t) for t in asyncio.all_tasks())
    KEEP.append(list(data))
    if how == "setnotset":
        swap_weakset(list(data))
        return
    if how == "setint":
        if V[1] >= 12:
            asyncio.tasks._scheduled_tasks = 12345
        else:
            asyncio.tasks._all_tasks = 12345
        return
    if how == "setbigdict":
        # the WeakSet's attribute `data` after 100 000 others: past the
        # PYT_DICT_MAX entries of a dict the census scans
        ws = swap_weakset(data)
        del ws.data
        for i in range(100000):
            setattr(ws, f"a{i}", i)
        ws.data = data
        return
    if how == "curdict":
        # asyncio's current-task dict swapped for one whose keys object
        # claims 2**40 entries at an index 2**23 bytes long (3.11+), or a
        # size of 2**20 (3.10)
        cur = {i: i for i in range(5)}
        KEEP.append(cur)
        asyncio.tasks._current_tasks = cur
        keys = rd64(id(cur) + 32)
        if V[1] == 10:
            expect(rd64(keys + 8), 8, "dk_size")
            wr64(keys + 8, 2 ** 20)
            wr64(keys + 32, 2 ** 40)
        else:
            expect(ctypes.c_uint8.from_address(keys + 8).value, 3, "dk_log2_size")
            ctypes.c_uint8.from_address(keys + 9).value = 23
            wr64(keys + 24, 2 ** 40)
        return
    swap_weakset(data)
    a = id(data) + 32                       # PySetObject.mask, then .table
    m = rd64(a)
    if m & (m + 1) or not 7 <= m < 1024 or not mapped(rd64(a + 8)):
        die(f"layout check failed: set mask {m:#x}, table {rd64(a + 8):#x}")
    if how == "setmask":
        wr64(a, 1000)
    elif how == "setmask40":
        wr64(a, 2 ** 40 - 1)
    elif how == "settable":
        wr64(a + 8, UNMAPPED)
    out[how] = {"set": hex(id(data))}


class Thing:
    pass


async def sc_entries(loop, out):
    ws = task_weakset()
    f, th, gone = loop.create_future(), Thing(), Thing()
    KEEP.extend([f, th])
    dead = weakref.ref(gone)
    hash(dead)                              # cached: a dead weakref has no hash
    del gone
    if dead() is not None:
        die("the dead weakref is alive")
    for r in (weakref.ref(f), weakref.ref(th), dead, 424242, "a string"):
        ws.data.add(r)
        KEEP.append(r)
    if V[1] >= 12:
        asyncio.tasks._eager_tasks.add(f)
        asyncio.tasks._eager_tasks.add(th)
        asyncio.tasks._eager_tasks.add(10 ** 30)
    out["entries"] = {"future": hex(id(f)), "thing": hex(id(th))}


def forged_coro(rng, code, depth, targets):
    """A forged coroutine (the real coroutine type, a frame of random words
    with a real or garbage code object); returns its address."""
    ctype = id(types.CoroutineType)
    if V[1] == 10:
        fr = ctypes.create_string_buffer(bytes(rng.getrandbits(8) for _ in range(512)), 512)
        co = ctypes.create_string_buffer(bytes(rng.getrandbits(8) for _ in range(128)), 128)
        KEEP.extend([fr, co])
        fa, ca = ctypes.addressof(fr), ctypes.addressof(co)
        wr64(ca + 8, ctype)
        wr64(ca + 16, fa)
        wr64(fa + 8, id(types.FrameType))
        wr64(fa + 32, code)
        if rng.random() < 0.7:                              # f_lasti: a plausible one
            wr32(fa + 96, rng.randrange(-2, 3000))
        wr32(fa + 80, rng.choice([0, 1, 2, 5, 64, 4095, 4096, 100000, -1, -2 ** 31]))
        fa_stack = fa + 352
        wr64(fa + 64, rng.choice([fa_stack, fa_stack, UNMAPPED, 0]))
        ctypes.c_int8.from_address(fa + 108).value = rng.choice([-1, -1, -1, 0, 1, 3])
        for k in range(min(depth, 16)):
            wr64(fa_stack + 8 * k, rng.choice(targets))
        return ca
    size = 1024
    co = ctypes.create_string_buffer(bytes(rng.getrandbits(8) for _ in range(size)), size)
    KEEP.append(co)
    ca = ctypes.addressof(co)
    wr64(ca + 8, ctype)
    fr = ca + L["cr_frame"]
    if LISTS:
        # the suspended states of this version mostly; f_executable a
        # stackref (tagged or not); the stackpointer a pointer
        lo, hi = L["susp"]
        ctypes.c_int8.from_address(ca + L["cr_state"]).value = rng.choice(
            [lo, hi, hi, -2, -1, 0, 1, 2, 3, 4, 5, -128])
        wr64(fr, code | rng.choice([0, 0, 1, 3]))
        if rng.random() < 0.7:                              # the instruction: in the code
            wr64(fr + 56, code + rng.randrange(0, 4096))
        lp = fr + L["f_localsplus"]
        wr64(fr + L["f_stackptr"], rng.choice(
            [lp + 8 * k for k in (0, 1, 2, 3, 5, 64, 110, 4095, 4096, 100000, -1)] +
            [lp + 11, 0, UNMAPPED, rng.getrandbits(64)]))
    else:
        ctypes.c_int8.from_address(ca + L["cr_state"]).value = rng.choice([-1, -1, -2, 0, 2, -128])
        wr64(fr + (32 if V[1] == 11 else 0), code)
        if rng.random() < 0.7:                              # the instruction: in the code
            wr64(fr + 56, code + rng.randrange(0, 4096))
        wr32(fr + L["f_stacktop"], rng.choice([0, 1, 2, 5, 64, 110, 4095, 4096, 100000, -1,
                                               -2 ** 31]))
    for k in range(min(depth, 100)):
        wr64(fr + L["f_localsplus"] + 8 * k, rng.choice(targets))
    return ca


def forged_str(rng, model):
    """A forged str: a real str's header, then random length and state."""
    raw = ctypes.string_at(id(model), 96)
    b = ctypes.create_string_buffer(raw + bytes(rng.getrandbits(8) for _ in range(4000)), 4096)
    KEEP.append(b)
    a = ctypes.addressof(b)
    wr64(a + 16, rng.choice([0, 1, 40, 4095, 4096, 2 ** 30, 2 ** 30 + 1, 2 ** 40, 2 ** 63,
                             rng.getrandbits(64)]))
    if rng.random() < 0.5:
        ctypes.c_uint32.from_address(a + 32).value = rng.getrandbits(32)
    return a


async def sc_forged(loop, out, seed):
    rng = random.Random(seed)
    ws = None if LISTS else task_weakset()
    fut = loop.create_future()
    KEEP.append(fut)
    if LISTS:
        anchor = asyncio.create_task(fut_body(fut), name="forged-anchor")
        KEEP.append(anchor)
        await settle([anchor])
    garbage = junk(8192, 0x5A)
    real_code = chain.__code__
    forged = []
    n = 64
    for i in range(n):
        b = ctypes.create_string_buffer(bytes(rng.getrandbits(8) for _ in range(512)), 512)
        KEEP.append(b)
        forged.append(ctypes.addressof(b))
    # every pointer a forged object may hold
    lock, sem = asyncio.Lock(), asyncio.Semaphore()
    KEEP.extend([lock, sem])

    def forged_obj(size, typ):
        b = ctypes.create_string_buffer(bytes(rng.getrandbits(8) for _ in range(size)), size)
        KEEP.append(b)
        a = ctypes.addressof(b)
        wr64(a + 8, id(typ))
        return a
    some = [0, UNMAPPED, garbage, *forged[:8]]
    # functions (a future's first callback), their code real or not
    funcs = [forged_obj(160, types.FunctionType) for _ in range(4)]
    for a in funcs:
        wr64(a + 48, rng.choice([id(real_code), id(asyncio.tasks._wrap_awaitable.__code__)
                                 if hasattr(asyncio.tasks, "_wrap_awaitable") else 0, *some]))
    # futures (a waiter), their first callback one of those
    futs = [forged_obj(256, asyncio.Future) for _ in range(4)]
    for a in futs:
        wr64(a + 24, rng.choice(funcs + some))
    # bound methods on a frame's stack (a held lock's __aexit__)
    meths = [forged_obj(64, types.MethodType) for _ in range(8)]
    for a in meths:
        wr64(a + 24, rng.choice([id(lock), id(sem), *some]))
    targets = [0, 1, 4096, UNMAPPED, garbage, garbage + 8, id(fut), id(ws), *forged,
               id(real_code), id(Thing), id(asyncio.Task), id(types.CoroutineType),
               *futs, *meths, *meths]
    strs = [forged_str(rng, "".join(["forged-name"])) for _ in range(8)]
    strs += [forged_str(rng, "".join(["\u0100forged"])) for _ in range(4)]
    strs += [forged_str(rng, "".join(["\U0001F600forged"])) for _ in range(4)]
    # code objects: copies of a real one with some words of their header
    # replaced (names, file, line table, first line...), line tables of
    # random bytes
    blobs = []
    for _ in range(8):
        raw = ctypes.string_at(id(b"x" * 64), 32)
        b = ctypes.create_string_buffer(raw + bytes(rng.getrandbits(8) for _ in range(4064)), 4096)
        KEEP.append(b)
        wr64(ctypes.addressof(b) + 16, rng.choice([0, 1, 100, 4000, 65536, 2 ** 20, 2 ** 62]))
        blobs.append(ctypes.addressof(b))
    codes = []
    size = real_code.__sizeof__()
    for _ in range(8):
        b = ctypes.create_string_buffer(ctypes.string_at(id(real_code), size), size)
        KEEP.append(b)
        a = ctypes.addressof(b)
        wr64(a, 1 << 30)                                    # a refcount, never used
        for _ in range(rng.randint(1, 6)):
            off = rng.randrange(16, min(size, 160)) & ~7
            wr64(a + off, rng.choice([*blobs, *strs, garbage, UNMAPPED, 0,
                                      rng.getrandbits(64), rng.getrandbits(31)]))
        codes.append(a)
    coros = [forged_coro(rng, rng.choice([id(real_code), garbage, 0, UNMAPPED, *codes, *codes]),
                         16, targets + [0] * 8) for _ in range(16)]
    targets += coros
    for a in forged:
        wr64(a + 8, id(asyncio.Task))                       # the real Task type
        wr32(a + L["t_state"], rng.choice([0, 0, 0, 1, 2, 3, -1]))
        wr64(a + L["t_coro"], rng.choice(coros + coros + [a, 0, garbage, UNMAPPED, id(fut)]))
        wr64(a + L["t_name"], rng.choice(strs + strs + [a, 0, garbage, id(7), UNMAPPED]))
        wr64(a + L["t_waiter"], rng.choice([0, id(fut), a, garbage, UNMAPPED, *forged[:4],
                                            *coros[:4], *futs]))
        wr64(a + 16, rng.choice([0, id(loop), garbage, a]))        # fut_loop
        wr64(a + 48, rng.choice([0, 0, garbage, a]))               # fut_exception
    if LISTS:
        # 3.14+: linked into this thread's list after its last task (the
        # anchor); the next of a node of the last 16 sometimes a forged one
        # (itself, another forged task, the anchor, garbage, unmapped, NULL)
        head = tstate() + L["ts_head"]
        check_tail(head, [anchor], "forged")
        nodes = [a + L["t_node"] for a in forged]
        for i, a in enumerate(nodes):
            nxt = nodes[i + 1] if i + 1 < n else head
            if i >= n - 16 and rng.random() < 0.15:
                nxt = rng.choice([a, *nodes, node(anchor), garbage + 1024, UNMAPPED, 0])
            wr64(a, nxt)
            wr64(a + 8, nodes[i - 1] if i else node(anchor))
        set_next(anchor, nodes[0], head)
        wr64(head + 8, nodes[-1])
        out["forged"] = {"n": n, "seed": seed, "addrs": [hex(a) for a in forged],
                         "anchor": hex(id(anchor))}
        return
    # the referents: real weakrefs in the real set, made to point at them
    holders = [Thing() for _ in range(n)]
    KEEP.extend(holders)
    for h, a in zip(holders, forged):
        r = weakref.ref(h)
        KEEP.append(r)
        ws.data.add(r)
        expect(rd64(id(r) + 16), id(h), "weakref wr_object")
        wr64(id(r) + 16, a)
    out["forged"] = {"n": n, "seed": seed, "addrs": [hex(a) for a in forged]}


async def sc_shared(loop, out, n, seconds):
    """n tasks whose task_coro all point at the outermost coroutine of one
    real chain of 1000: every one of them is a chain of 1000 to walk."""
    fut = loop.create_future()
    owner = asyncio.create_task(chain(1000, fut), name="shared-owner")
    KEEP.extend([fut, owner])
    await settle([owner])
    await sc_many(loop, out, n, seconds)
    # and a FutureIter whose future is itself
    it = fut.__await__()
    KEEP.append(it)
    expect(rd64(id(it) + 16), id(fut), "FutureIter.future")
    wr64(id(it) + 16, id(it))
    heads = [id(owner.get_coro()), id(it)]
    k = 0
    for t in KEEP:
        if isinstance(t, asyncio.Task) and t.get_coro() is not None and t is not owner \
                and t.get_coro().cr_code is chain.__code__ and t.get_name().startswith("Task-"):
            set_coro(t, heads[k % 2])
            k += 1
    out["shared"] = {"owner": hex(id(owner)), "fut": hex(id(fut)), "n": k}


async def deep_task(n, fut, name):
    t = asyncio.create_task(chain(n, fut), name=name)
    KEEP.append(t)
    return t


async def sc_stack(loop, out):
    fut = loop.create_future()
    KEEP.append(fut)
    vic = {n: asyncio.create_task(chain(3, fut), name=n) for n in ("st-huge", "st-neg", "st-edge")}
    vic["deep-1000"] = asyncio.create_task(chain(1000, fut), name="deep-1000")
    vic["deep-5000"] = asyncio.create_task(chain(5000, fut), name="deep-5000")
    KEEP.extend(vic.values())
    await settle(list(vic.values()))
    for n, v in (("st-huge", 100000), ("st-neg", -5), ("st-edge", 4095)):
        set_stack_top(vic[n].get_coro(), v)
    for n, t in vic.items():
        out[n] = {"id": hex(id(t)), "fut": hex(id(fut))}
    if LISTS:
        await stack_ptr(loop, out, fut)


async def stack_ptr(loop, out, fut):
    """3.14+: the stackpointer NULL, unaligned, yf_depth slots up (the
    awaited object is then the frame's first local, the int 3); a stack
    slot's tag bit set (masked: the chain whole); 3.15: the value sent
    (above the awaited object) made garbage (not read)."""
    names = ["st-null", "st-odd", "st-low", "st-tag"] + (["st-sent"] if L["yf_depth"] > 1 else [])
    vic = {n: asyncio.create_task(chain(3, fut), name=n) for n in names}
    KEEP.extend(vic.values())
    await settle(list(vic.values()))
    for n, t in vic.items():
        out[n] = {"id": hex(id(t)), "fut": hex(id(fut))}
    c = {n: t.get_coro() for n, t in vic.items()}
    wr64(stack_count(c["st-null"]), 0)
    a = stack_count(c["st-odd"])
    wr64(a, rd64(a) + 3)
    lp = id(c["st-low"]) + L["cr_frame"] + L["f_localsplus"]
    expect(rd64(lp) & ~7, id(3), "st-low: the first local (n)")
    out["st-low"]["obj"] = hex(id(3))
    set_stack_top(c["st-low"], L["yf_depth"])
    for n in ("st-tag", "st-sent"):
        if n in c:
            slot = top_slot(c[n])
            if n == "st-tag":
                wr64(slot, rd64(slot) | 1)
            else:
                wr64(slot + 8, junk() + 64)


# ---------------------------------------------------------------- 3.14+: list scenarios

class SubTask(asyncio.Task):
    """A Task subclass made in Python: a native task all the same."""


class FutX(asyncio.Future):
    """A Future whose slot s5 is at +152, where a task's task_node is."""
    __slots__ = tuple(f"s{i}" for i in range(8))


def not_task_at_152(obj, value, what):
    """obj (not a task, its own: an int's digits, a FutX's slot s5) made to
    hold value at obj + 152, where a task has task_node.next."""
    if L["t_node"] != 152 or obj.__sizeof__() < 160:
        die(f"layout check failed: {what}: {obj.__sizeof__()} bytes")
    wr64(id(obj) + 152, value)


async def sc_lists(loop, out):
    """Every non-looping corruption of a list, one list each (a list that
    stops hides only the rest of itself), and the running task of the
    thread states."""
    fut = loop.create_future()
    KEEP.append(fut)
    head = tstate() + L["ts_head"]
    # this thread's list, after the healthy tasks: a Task subclass, and
    # three tasks linked through an int's digits and a Future's slot
    sub = SubTask(fut_body(fut), loop=loop, name="l-sub")
    skip = [asyncio.create_task(fut_body(fut), name=f"l-skip-{i}") for i in (1, 2, 3)]
    mine = [sub, *skip]
    KEEP.extend(mine)
    await settle(mine)
    check_tail(head, mine, "this thread")
    # threads of their own (a list each), and two that ended, their tasks
    # left pending (the interpreter's list: o-1, then o-2, o-bad)
    sides = {k: side_thread([f"{k}-ok", f"{k}-bad"]) for k in ("tn", "tu", "tg")}
    sides["th"] = side_thread(["th-1", "th-2"])
    o1 = side_thread(["o-1"], end=True)
    o2 = side_thread(["o-2", "o-bad"], end=True)
    ih = interp_head()
    orph = [*o1["tasks"], *o2["tasks"]]
    if walk(ih, "the interpreter's list") != [id(t) for t in orph]:
        die("layout check failed: the interpreter's list does not hold the tasks of the "
            "threads that ended")
    for k, sd in sides.items():
        expect(rd64(sd["ts"] + L["ts_running"]), 0, f"{k}: no running task")
    expect(rd64(MAIN_TS + L["ts_running"]), 0, "the main thread: no running task")
    garbage = junk(8192)
    big = (1 << 1199) + len(sys.argv)           # 40 digits: 184 bytes, fresh
    fx = FutX(loop=loop)
    mark = object()
    fx.s5 = mark
    expect(rd64(id(fx) + 152), id(mark), "FutX.s5")
    other = (1 << 1199) + 2 * len(sys.argv)     # another
    KEEP.extend([big, fx, mark, other])
    # everything is parked: from here on no task is made or finished
    not_task_at_152(big, node(skip[1]), "an int")
    set_next(skip[0], id(big) + 152, node(skip[1]))
    not_task_at_152(fx, node(skip[2]), "FutX")
    set_next(skip[1], id(fx) + 152, node(skip[2]))
    bad = {"tn": 0, "tu": UNMAPPED, "tg": garbage + 1024}
    for k, v in bad.items():
        ok_, bad_ = sides[k]["tasks"]
        set_next(bad_, v, sides[k]["head"])
    # the interpreter's list: o-bad -> an int's +152 -> unmapped
    not_task_at_152(other, UNMAPPED, "an int")
    set_next(orph[-1], id(other) + 152, ih)
    # the running task of a thread state: one of its tasks (shown running),
    # unmapped, garbage; a task in no list (not shown); an int
    wr64(sides["tn"]["ts"] + L["ts_running"], id(sides["tn"]["tasks"][0]))
    wr64(sides["tu"]["ts"] + L["ts_running"], UNMAPPED)
    wr64(sides["tg"]["ts"] + L["ts_running"], garbage)
    wr64(sides["th"]["ts"] + L["ts_running"], id(sides["th"]["tasks"][0]))
    wr64(MAIN_TS + L["ts_running"], id(other))
    # last: a thread state's head -> garbage (its tasks out of reach)
    sh = sides["th"]["head"]
    expect(rd64(sh), node(sides["th"]["tasks"][0]), "th: the head's next")
    wr64(sh, garbage + 2048)
    for t in mine:
        out[t.get_name()] = {"id": hex(id(t)), "fut": hex(id(fut))}
    for sd in [*sides.values(), o1, o2]:
        for t in sd["tasks"]:
            out[t.get_name()] = {"id": hex(id(t)), "fut": hex(id(sd["fut"]))}
    out["lists"] = {"hidden": ["th-1", "th-2"], "running": ["tn-ok"]}


async def sc_loop(loop, out, how):
    """A list that does not come back to its head: lself a task's next is
    itself; lback the last of three -> the first of them; lcross -> a task
    of another thread's list (round that list, its head a node too, for
    good); linterp the interpreter's list (walked first): o-2 -> o-1."""
    fut = loop.create_future()
    KEEP.append(fut)
    head = tstate() + L["ts_head"]
    names = {"lself": ["l-a", "l-self"], "lback": ["l-a", "l-b", "l-c"], "lcross": ["l-a"],
             "linterp": []}[how]
    vic = [asyncio.create_task(fut_body(fut), name=n) for n in names]
    KEEP.extend(vic)
    await settle(vic)
    if vic:
        check_tail(head, vic, how)
    if how == "lself":
        set_next(vic[1], node(vic[1]), head)
    elif how == "lback":
        set_next(vic[2], node(vic[0]), head)
    elif how == "lcross":
        x = side_thread(["x-1", "x-2"])
        set_next(vic[0], node(x["tasks"][0]), head)
        vic += x["tasks"]
    else:
        o = side_thread(["o-1", "o-2"], end=True)
        ih = interp_head()
        if walk(ih, "the interpreter's list") != [id(t) for t in o["tasks"]]:
            die("layout check failed: the interpreter's list")
        set_next(o["tasks"][1], node(o["tasks"][0]), ih)
        vic = o["tasks"]
        fut = o["fut"]
    for t in vic:
        out[t.get_name()] = {"id": hex(id(t)), "fut": hex(id(t._fut_waiter))}


async def sc_flip(loop, out, seed):
    """While it is read: f-1's next flipped, every 0.2 ms, between f-2 (as it
    is), f-3, NULL, garbage, unmapped and itself; and a thread whose loop
    makes and ends tasks without pause (the census before holds tasks done
    since, their memory freed and reused)."""
    fut = loop.create_future()
    KEEP.append(fut)
    head = tstate() + L["ts_head"]
    vic = [asyncio.create_task(fut_body(fut), name=f"f-{i}") for i in (1, 2, 3, 4)]
    KEEP.extend(vic)
    await settle(vic)
    check_tail(head, vic, "flip")
    a = node(vic[0])
    expect(rd64(a), node(vic[1]), "f-1: task_node.next")
    garbage = junk()
    values = [node(vic[1]), node(vic[1]), node(vic[2]), 0, garbage + 1024, UNMAPPED, a]

    def flip():
        rng = random.Random(seed)
        while True:
            wr64(a, rng.choice(values))
            time.sleep(0.0002)

    def churn():
        lp = asyncio.new_event_loop()
        rng = random.Random(seed)

        async def one(i):
            await asyncio.sleep(rng.random() * 0.004)

        async def run():
            i = 0
            while True:
                for _ in range(20):
                    asyncio.create_task(one(i), name=f"churn-{i}")
                    i += 1
                await asyncio.sleep(0.001)
        lp.run_until_complete(run())
    for fn in (churn, flip):
        threading.Thread(target=fn, daemon=True).start()
    for t in vic:
        out[t.get_name()] = {"id": hex(id(t)), "fut": hex(id(fut))}


def asyncio_debug():
    """The address of _asyncio's debug offsets in memory (its .AsyncioDebug
    section: 3.14 in the extension module, 3.15 in the interpreter), its
    words checked against LAYOUT."""
    import _asyncio
    path = os.path.realpath(getattr(_asyncio, "__file__", None) or "/proc/self/exe")
    with open(path, "rb") as f:
        d = f.read()
    etype, = struct.unpack_from("<H", d, 16)
    phoff, = struct.unpack_from("<Q", d, 0x20)
    shoff, = struct.unpack_from("<Q", d, 0x28)
    phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", d, 0x36)
    loads = [struct.unpack_from("<IIQQ", d, phoff + i * phentsize) for i in range(phnum)]
    low = min(ph[3] for ph in loads if ph[0] == 1)             # PT_LOAD p_vaddr
    sh = [struct.unpack_from("<IIQQQQ", d, shoff + i * shentsize) for i in range(shnum)]
    strtab = sh[shstrndx][4]
    at = None
    for name, _, flags, addr, _, size in sh:
        if d[strtab + name:d.index(b"\0", strtab + name)] == b".AsyncioDebug":
            at, wsize = addr, size
    if at is None:
        die(f"layout check failed: no .AsyncioDebug in {path}")
    if etype == 3:                                              # ET_DYN: where it is mapped
        with open("/proc/self/maps") as f:
            base = [int(l.split("-")[0], 16) for l in f
                    if l.split()[-1] == path and int(l.split()[2], 16) == 0]
        if not base:
            die(f"layout check failed: {path} is not mapped")
        at += base[0] - low
    w = [rd64(at + 8 * i) for i in range(13)]
    for i, want in ((0, 168), (1, L["t_name"]), (5, L["t_coro"]), (6, L["t_node"]),
                    (8, L["interp_head"]), (11, L["ts_running"]), (12, L["ts_head"])):
        expect(w[i], want, f"AsyncioDebug word {i}")
    return at


async def sc_dbg(loop, out, seed):
    """_asyncio's debug offsets (what the census takes over its own table)
    rewritten: seed 0, the task's list node at 0 (each task read at its
    node's address: none is a task); seed 1, the task's size 2**40 (out of
    the census's bounds: refused); else random words within the bounds
    the census checks (offsets within the task's or the thread state's
    size, 16 bits for the interpreter's head)."""
    at = asyncio_debug()
    if seed in (0, 1):
        wr64(at + (48 if seed == 0 else 0), 0 if seed == 0 else 2 ** 40)
        out["dbg"] = {"seed": seed}
        return
    rng = random.Random(seed)
    w = {0: rng.choice([168, 168, 64, 120, 192])}
    tss = rd64(at + 8 * 9)
    bounds = {1: w[0] - 8, 5: w[0] - 8, 6: w[0] - 16, 8: (1 << 16) - 1, 11: tss - 8, 12: tss - 16}
    for i, hi in bounds.items():
        if rng.random() < (0.3 if i in (6, 8, 12) else 0.7):     # the lists mostly found
            w[i] = rng.choice([rng.randint(0, hi), rng.randint(0, hi) & ~7, 0, hi])
    for i, v in w.items():
        wr64(at + 8 * i, v)
    out["dbg"] = {"seed": seed, "words": w}


# ---------------------------------------------------------------- main

async def main(a):
    try:
        await scenario(a)
    except Exception:
        traceback.print_exc()
        die("the target failed (stderr)")   # before asyncio.run's cleanup reads the victims


async def scenario(a):
    loop = asyncio.get_running_loop()
    sys.setrecursionlimit(100000)       # chains of 1000 and 5000 coroutines
    me = asyncio.current_task()         # before a scenario swaps the current-task dict
    me.set_name("main")
    if mapped(UNMAPPED):
        die(f"{UNMAPPED:#x} is mapped here")
    if LISTS:
        # the running task and this thread's list, where the layout says
        ts = tstate()
        expect(rd64(ts + L["ts_running"]), id(me), "the thread state's running task")
        if id(me) not in walk(ts + L["ts_head"], "this thread's list"):
            die("layout check failed: the running task is not in this thread's list")
    ok = await healthy()
    out = {}
    gc.disable()
    s = a.scenario
    if s == "cycles":
        await sc_cycles(loop, out)
    elif s == "names":
        await sc_names(loop, out)
    elif s == "fields":
        await sc_fields(loop, out)
    elif s == "many":
        await sc_many(loop, out, a.many, a.seconds)
    elif s == "shared":
        await sc_shared(loop, out, a.many, a.seconds)
    elif s == "exit":
        await sc_many(loop, out, a.many, a.seconds, depth=8)
    elif (s.startswith("set") or s in ("curdict", "entries")) and LISTS:
        die(f"{s}: CPython {V[0]}.{V[1]} has no task set")
    elif s.startswith("set") or s == "curdict":
        await sc_set(loop, out, s)
    elif s == "entries":
        await sc_entries(loop, out)
    elif s in ("lists", "lself", "lback", "lcross", "linterp", "lflip", "dbg") and not LISTS:
        die(f"{s}: CPython {V[0]}.{V[1]} has no task lists")
    elif s == "lists":
        await sc_lists(loop, out)
    elif s in ("lself", "lback", "lcross", "linterp"):
        await sc_loop(loop, out, s)
    elif s == "lflip":
        await sc_flip(loop, out, a.seed)
    elif s == "dbg":
        await sc_dbg(loop, out, a.seed)
    elif s == "forged":
        await sc_forged(loop, out, a.seed)
    elif s == "stack":
        await sc_stack(loop, out)
    else:
        die(f"unknown scenario {s}")
    gc.disable()
    ready = {"version": ".".join(map(str, sys.version_info[:3])), "main": hex(id(me)),
             "healthy": ok, "victims": out}
    # printed from a callback: main is parked on its future by then
    loop.call_soon(lambda: print(json.dumps(ready), flush=True))
    await loop.create_future()  # AT-MAIN


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("--many", type=int, default=200000)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=1)
    if L is None:
        die(f"CPython {sys.version.split()[0]}: no layout")
    a = ap.parse_args()
    # the loop in a thread with a large stack: the first step of a chain
    # of 5000 coroutines recurses in C (3.10, 3.11)
    threading.stack_size(512 << 20)
    def run():
        try:
            asyncio.run(main(a))
        except BaseException:
            traceback.print_exc()
            die("the target failed (stderr)")
    th = threading.Thread(target=run, daemon=True)
    if LISTS:
        MAIN_TS = tstate()
    th.start()
    threading.stack_size(0)             # the other threads (3.14+ scenarios)
    th.join()
