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
coroutine, name, waiter, state; a frame's stack top = coro.cr_await): a
wrong offset fails here ("layout check failed", exit 3) instead of
corrupting something else.

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
                garbage) -- a seeded fuzz of everything read from a task
    stack       st-huge / st-neg / st-edge: the task coroutine's frame stack
                top made 100000 / -5 / 4095; deep-1000: a chain of 1000
                coroutines (under LS_PYT_WALK); deep-5000: 5000 (beyond it)
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
}
L = LAYOUT[V[1]] if V[0] == 3 and V[1] in LAYOUT else None
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
    """The address of the frame's stack count (3.10 f_stackdepth, 3.11+
    stacktop), checked: the top slot is at count - 1."""
    top_slot(coro)
    if V[1] == 10:
        return rd64(id(coro) + L["cr_frame"]) + L["f_stackdepth"]
    return id(coro) + L["cr_frame"] + L["f_stacktop"]


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
    ctypes.c_int8.from_address(ca + L["cr_state"]).value = rng.choice([-1, -1, -2, 0, 2, -128])
    fr = ca + L["cr_frame"]
    wr64(fr + (32 if V[1] == 11 else 0), code)
    if rng.random() < 0.7:                                  # the instruction: in the code
        wr64(fr + 56, code + rng.randrange(0, 4096))
    wr32(fr + L["f_stacktop"], rng.choice([0, 1, 2, 5, 64, 110, 4095, 4096, 100000, -1, -2 ** 31]))
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
    ws = task_weakset()
    fut = loop.create_future()
    KEEP.append(fut)
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
        wr32(stack_count(vic[n].get_coro()), v)
    for n, t in vic.items():
        out[n] = {"id": hex(id(t)), "fut": hex(id(fut))}


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
    elif s.startswith("set") or s == "curdict":
        await sc_set(loop, out, s)
    elif s == "entries":
        await sc_entries(loop, out)
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
    th.start()
    th.join()
