#!/usr/bin/env python3
"""make_generic_fixture.py -- write tests/viewer/fixtures/generic.sql, a
hand-made trace of the generic loop mode (meta mode = 'generic': a process
not built on libevl, here a CPython asyncio server), and generic_killed.sql,
the same recording as left by a recorder killed before it wrote the
iteration histogram.

    make_generic_fixture.py

Until the recorder's generic mode produces real recordings, this is what
the viewer's generic paths are tested on.  Built like make_rules_fixture.py:
tracer/schema.sql, the lookup tables copied from the lifecycle fixture, and
rows shaped as the recorder (tracer/decode_generic.c) writes them:

- two loop threads (loops.id = tid): 31337, the main asyncio loop, and
  31345, a second thread running its own loop;
- each thread's iterations simulated (a wait, then the busy part until the
  next wait), summed into loop_windows as the recorder does (a window ends
  at the first iteration end after window_ns; the busy and wait of an
  iteration count in the window where it ends; a window is long when the
  loop sat idle: thread 31337 waits 300 ms at +1.2 s) and into
  iteration_hist (power-of-two buckets: [0, 2), then [2^b, 2^(b+1)));
- no events, no task_stats; tasks rows only for the asyncio tasks named in
  blocking episodes (id = the Task object's address);
- blocking: a 52 ms off-CPU clock_nanosleep (time.sleep in a coroutine) in
  task 'sleepy-handler', with merged native and Python frames; a 12 ms
  off-CPU fsync in task 'Task-12'; a 25 ms on-CPU episode (json parsing) on
  thread 31345 outside any task, whose stack has a frame with hostile
  strings (ANSI escapes, a newline, XML and DOT metacharacters, a
  right-to-left override) in its function and file names.

The simulation uses a fixed seed and only random.random() (stable across
Python versions).  Rerun after a schema change, then refresh the goldens
(run_golden.py --update) and review their diff.
"""
import math
import os
import random
import re

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = os.path.join(HERE, "..", "..", "tracer", "schema.sql")
DERIVED = os.path.join(HERE, "..", "..", "model", "derived.sql")
LOOKUPS = ("event_kinds", "states", "suspend_reasons", "waker_kinds", "leak_kinds",
           "blocking_kinds", "syscalls")

US = 1_000
MS = 1_000_000
T0 = 7_000_000_000            # recording start (CLOCK_MONOTONIC ns)
END = T0 + 2000 * MS
WINDOW = 20 * MS
PID = 31337
MAIN, WORKER = 31337, 31345   # loop threads
CLOCK_NANOSLEEP, FSYNC = 230, 74
OFF_CPU, ON_CPU = 1, 2
PYTHON = "/usr/bin/python3.11"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
ASYNCIO = "/usr/lib/python3.11/asyncio/"
SLEEPY, TASK12 = 0x7F3A1C2B4E50, 0x7F3A1C2D0F90   # asyncio Task objects


def q(v):
    if v is None:
        return "NULL"
    if isinstance(v, bytes):                 # exact bytes, stored as TEXT
        return f"CAST(X'{v.hex()}' AS TEXT)"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return str(v)


def expo(rng, mean):
    return int(-mean * math.log(1.0 - rng.random()))


def simulate(rng, first, busy_mean, wait_mean, specials):
    """Iterations of one loop thread: (start, busy, wait), start = the wait's
    return.  specials: [(at_ns, busy, wait)]: the first iteration starting at
    or after at_ns gets that busy (and wait, unless None) time."""
    its, t = [], first
    todo = sorted(specials)
    while True:
        busy = expo(rng, busy_mean) + 3 * US
        if rng.random() < 0.02:                 # an occasional slow callback
            busy += int(rng.random() * 3 * MS)
        wait = expo(rng, wait_mean) + 10 * US
        if todo and t >= todo[0][0]:
            _, busy, w = todo.pop(0)
            wait = w if w is not None else wait
        if t + busy + wait > END - 5 * MS:
            break
        its.append((t, busy, wait))
        t += busy + wait
    return its


def windows(its):
    """Summed as the recorder does: (start, end, iterations, wait, busy, max_busy)."""
    rows, cur = [], None
    for start, busy, wait in its:
        end = start + busy + wait                # the next wait's return
        if cur is None:
            cur = [start, end, 0, 0, 0, 0]
        cur[1] = end
        cur[2] += 1
        cur[3] += wait
        cur[4] += busy
        cur[5] = max(cur[5], busy)
        if end - cur[0] >= WINDOW:
            rows.append(tuple(cur))
            cur = None
    if cur:
        rows.append(tuple(cur))
    return rows


def histogram(its):
    buckets = {}
    for _, busy, _ in its:
        b = max(busy.bit_length() - 1, 0)
        lo, hi = (1 << b if b else 0), 2 << b
        c = buckets.setdefault(lo, [hi, 0, 0])
        c[1] += 1
        c[2] += busy
    return sorted((lo, hi, n, ns) for lo, (hi, n, ns) in buckets.items())


def frames(stack_id, rows):
    """rows innermost first: (function, file, line, module); Python frames
    have module 'python' and address 0."""
    out = []
    for depth, (fn, file, line, module) in enumerate(rows):
        addr = 0 if module == "python" else 0x55D0_0000_0000 + stack_id * 0x1000 + depth * 0x40
        if module == LIBC:
            addr = 0x7F3A_2000_0000 + stack_id * 0x1000 + depth * 0x40
        out.append(f"INSERT INTO frames VALUES({stack_id},{depth},{addr},{q(fn)},{q(file)},"
                   f"{q(line)},{q(module)});")
    return out


ASYNCIO_TAIL = [
    ("Handle._run", ASYNCIO + "events.py", 80, "python"),
    ("BaseEventLoop._run_once", ASYNCIO + "base_events.py", 1922, "python"),
    ("BaseEventLoop.run_forever", ASYNCIO + "base_events.py", 607, "python"),
]
MAIN_TAIL = ASYNCIO_TAIL + [
    ("BaseEventLoop.run_until_complete", ASYNCIO + "base_events.py", 640, "python"),
    ("run", ASYNCIO + "runners.py", 118, "python"),
    ("<module>", "/srv/shop/server.py", 120, "python"),
    ("pymain_run_python", "./Modules/main.c", 600, PYTHON),
    ("Py_BytesMain", "./Modules/main.c", 734, PYTHON),
    ("__libc_start_call_main", None, None, LIBC),
    ("_start", None, None, PYTHON),
]
HOSTILE_FN = b"parse_\x1b[31mreport\x1b[0m<b>&\"'\n\\N\\l{x|y}"
HOSTILE_FILE = "/srv/shop/rep\u202eorts.py".encode() + b"\xff"

STACKS = {
    # time.sleep(0.05) inside a coroutine
    1: [("__GI___clock_nanosleep", None, None, LIBC),
        ("pysleep", "./Modules/timemodule.c", 2148, PYTHON),
        ("time_sleep", "./Modules/timemodule.c", 410, PYTHON),
        ("cfunction_vectorcall_O", "./Objects/methodobject.c", 509, PYTHON),
        ("slow_lookup", "/srv/shop/inventory.py", 41, "python"),
        ("Server.handle", "/srv/shop/server.py", 88, "python")] + MAIN_TAIL,
    # os.fsync in a coroutine
    3: [("fsync", None, None, LIBC),
        ("os_fsync_impl", "./Modules/posixmodule.c", 10920, PYTHON),
        ("save_order", "/srv/shop/orders.py", 57, "python"),
        ("Server.handle", "/srv/shop/server.py", 92, "python")] + MAIN_TAIL,
    # json parsing in a callback of the worker thread's loop (on-CPU)
    2: [("scan_once_unicode", None, None,
         "/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so"),
        ("JSONDecoder.raw_decode", "/usr/lib/python3.11/json/decoder.py", 353, "python"),
        ("JSONDecoder.decode", "/usr/lib/python3.11/json/decoder.py", 337, "python"),
        ("loads", "/usr/lib/python3.11/json/__init__.py", 346, "python"),
        (HOSTILE_FN, HOSTILE_FILE, 17, "python")] + ASYNCIO_TAIL + [
        ("Thread.run", "/usr/lib/python3.11/threading.py", 975, "python"),
        ("thread_run", "./Modules/_threadmodule.c", 1124, PYTHON),
        ("start_thread", None, None, LIBC),
        ("clone3", None, None, LIBC)],
}


def build(with_hist):
    rng = random.Random(20261201)
    # main: the two blocking iterations, and a 300 ms idle wait after +1.2 s
    main = simulate(rng, T0 + 150 * US, 150 * US, 800 * US,
                    [(T0 + 400 * MS, 52 * MS + 430 * US, None),
                     (T0 + 800 * MS, 12 * MS + 180 * US, None),
                     (T0 + 1200 * MS, 90 * US, 300 * MS)])
    worker = simulate(rng, T0 + 2 * MS + 70 * US, 400 * US, 2 * MS,
                      [(T0 + 900 * MS, 25 * MS + 310 * US, None)])

    def at(its, ns):
        return next(s for s, _, _ in its if s >= ns)

    out = [open(SCHEMA).read(), open(DERIVED).read()]
    for line in open(os.path.join(HERE, "fixtures", "lifecycle.sql")):
        m = re.match(r"INSERT INTO (\w+) VALUES", line)
        if m and m.group(1) in LOOKUPS:
            out.append(line.rstrip("\n"))
    meta = {
        "tool": "loopscope 0.1.0", "schema_version": "1", "host": "fixture",
        "kernel": "Linux (hand-made)", "clock": "CLOCK_MONOTONIC", "target_pid": str(PID),
        "target_binary": PYTHON, "target_cmdline": "python3 /srv/shop/server.py --port 8080",
        "recorder_cmdline": f"record -p {PID} -o generic.db -t 2",
        "mode": "generic", "runtime": "CPython 3.11.2", "wait_calls": "epoll",
        "window_ns": str(WINDOW), "ringbuf_kb": "65536", "blocking_detection": "on",
        "syscalls": "off", "block_threshold_ns": str(10 * MS), "start_ns": str(T0),
        "end_ns": str(END), "duration_ns": str(END - T0), "start_utc": "2026-12-01T10:00:00Z",
        "end_utc": "2026-12-01T10:00:02Z",
        "stop_reason": "duration reached" if with_hist else "terminated by signal",
        "batches": "0", "records": "0", "dropped_messages": "0", "dropped_bytes": "0",
        "dropped_events_claimed": "0", "rejected_records": "0", "rejected_messages": "0",
        "untracked_tasks": "0", "snapshot_request_failures": "0", "blocking_episodes": "3",
        "read_errors": "0",
    }
    for k, v in sorted(meta.items()):
        out.append(f"INSERT INTO meta VALUES({q(k)},{q(v)});")
    for tid, its in ((MAIN, main), (WORKER, worker)):
        out.append(f"INSERT INTO loops VALUES({tid},{PID},{tid},{its[0][0]},NULL);")
    out.append(f"INSERT INTO tasks VALUES({SLEEPY},{MAIN},NULL,'sleepy-handler',NULL,NULL,"
               "NULL,0,NULL,NULL,NULL,NULL);")
    out.append(f"INSERT INTO tasks VALUES({TASK12},{MAIN},NULL,'Task-12',NULL,NULL,"
               "NULL,0,NULL,NULL,NULL,NULL);")
    for tid, its in ((MAIN, main), (WORKER, worker)):
        for row in windows(its):
            out.append(f"INSERT INTO loop_windows VALUES({tid},{','.join(map(str, row))});")
    if with_hist:
        for tid, its in ((MAIN, main), (WORKER, worker)):
            for lo, hi, n, ns in histogram(its):
                out.append(f"INSERT INTO iteration_hist VALUES({tid},{lo},{hi},{n},{ns});")
    for sid, rows in sorted(STACKS.items()):
        out.append(f"INSERT INTO stacks VALUES({sid},{len(rows)});")
        out += frames(sid, rows)
    # episodes inside their iterations: the busy part starts at the wait's return
    s_sleep = at(main, T0 + 400 * MS) + 210 * US
    s_fsync = at(main, T0 + 800 * MS) + 95 * US
    s_json = at(worker, T0 + 900 * MS) + 160 * US
    out.append(f"INSERT INTO blocking VALUES(1,{MAIN},{SLEEPY},{s_sleep},{52 * MS + 87 * US},"
               f"{OFF_CPU},{CLOCK_NANOSLEEP},1,0);")
    out.append(f"INSERT INTO blocking VALUES(2,{WORKER},NULL,{s_json},{25 * MS + 2 * US},"
               f"{ON_CPU},NULL,2,0);")
    out.append(f"INSERT INTO blocking VALUES(3,{MAIN},{TASK12},{s_fsync},{12 * MS + 11 * US},"
               f"{OFF_CPU},{FSYNC},3,0);")
    name = "generic" if with_hist else "generic_killed"
    path = os.path.join(HERE, "fixtures", f"{name}.sql")
    with open(path, "w") as f:
        f.write("-- generated by tests/viewer/make_generic_fixture.py: edit that, not this\n")
        f.write("\n".join(out) + "\n")
    print(f"wrote {os.path.relpath(path)}: {len(main)} + {len(worker)} iterations, "
          f"{len(windows(main))} + {len(windows(worker))} windows")


if __name__ == "__main__":
    build(True)
    build(False)
