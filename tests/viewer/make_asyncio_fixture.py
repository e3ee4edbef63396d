#!/usr/bin/env python3
"""make_asyncio_fixture.py -- write tests/viewer/fixtures/asyncio.sql, a
hand-made trace of the generic loop mode with an asyncio task lifecycle: a
CPython 3.12 asyncio program recorded with a census of its tasks every
10 ms (meta task_source 'census every 10 ms'; tracer/decode_asyncio.c).

    make_asyncio_fixture.py

What the viewer's views are tested on for such traces (ls_has_lifecycle,
viewer/trace.h), without a recorder: built like make_generic_fixture.py
(tracer/schema.sql, the lookup tables of the lifecycle fixture, one loop
thread's iterations summed into loop_windows and iteration_hist), with the
task lifecycle made the way the recorder makes it: what each census saw of
each task (state, why it waits, on what, the lock's holder, cancel
requests) diffed into events by the rules of decode_asyncio.c's diff() and
vanished(), every event stamped with its census's time, a wake's waker
unknown (waker kind 0, arg0 0):

- main (pre-existing) sleeps to the end;
- dl-a and dl-b take a lock each, sleep, then wait for each other's lock
  (suspend reason lock, arg1 the holder's id): deadlocked to the end;
- fan gathers fan-0 and fan-1 (sleeps), which finish; fan-1 and fan are
  seen ready (woken, waker unknown) before they finish;
- awaiter awaits the task sleeper (reason task, arg0 its id); sleeper is
  cancelled (a cancel request, then cancelled), awaiter finishes;
- leaky awaits a future and is freed while pending: an abandoned verdict;
- failer fails and is freed with its exception unretrieved: an
  unretrieved verdict;
- q-get waits on a queue, is seen running at three censuses in a row
  (a 33 ms time.sleep: a blocking episode with Python frames), waits again;
- a task whose name holds hostile strings (ANSI escapes, a newline, XML
  and DOT metacharacters, a right-to-left override) waits on an event and
  finishes;
- Task-77, never seen by a census, blocks 15 ms on-CPU: its tasks row is
  the recorder's hash of its Task object's address and name, without
  events (decode_generic.c's block_task).

The await chains the censuses read (await_stacks: a stacks row of Python
frames per task_suspend, innermost coroutine first, shared by equal
chains as the recorder shares them): the deadlocked tasks' (their sleeps,
then Lock.acquire under `async with` in an application helper), main's,
fan's gather, awaiter's await of sleeper, leaky's future, q-get's two
queue waits (one stack), the hostile task's event wait (a hostile function
and file name); none for sleeper and failer (a chain the census could not
read).

Rerun after a schema change, then refresh the goldens (run_golden.py
--update) and review their diff.
"""
import os
import random
import re

import make_generic_fixture as g

HERE = os.path.dirname(os.path.abspath(__file__))
PROBES = os.path.join(HERE, "..", "..", "loop", "include", "evl-probes.h")
LOOKUPS = ("event_kinds", "states", "leak_kinds", "blocking_kinds", "syscalls")
q, MS, US = g.q, g.MS, g.US

T0 = 9_000_000_000            # recording start (CLOCK_MONOTONIC ns)
END = T0 + 1500 * MS
PID = MAIN = 4242             # the loop thread: the main thread
PYTHON = "/usr/bin/python3.12"
LIBC = g.LIBC
ASYNCIO = "/usr/lib/python3.12/asyncio/"
CLOCK_NANOSLEEP = 230
OFF_CPU, ON_CPU = 1, 2


def census(k):
    """The time of census k: every 10 ms from 4 ms after the start."""
    return T0 + 4 * MS + k * 10 * MS + (k * 37 % 11) * 13 * US   # a little jitter


# kinds, reasons, states (tracer/SCHEMA.md, loop/include/evl-probes.h)
CREATE, RUN, SUSPEND, WAKE, FINISH, CANCEL, LEAK = 3, 4, 5, 6, 7, 8, 9
SLEEP, FUTURE, TASK, GATHER, LOCK, EVENT, QUEUE_GET = 1, 3, 4, 7, 8, 9, 12
FINISHED, FAILED, CANCELLED = 4, 5, 6
ABANDONED, UNRETRIEVED = 2, 3
# what a census sees (tracer/pytasks.h): running, ready, waiting, done
RUNNING, READY, WAITING = "running", "ready", "waiting"

HOSTILE = "ev\x1b[31mil\x1b[0m <b>&\"'\n{x|y}\u202egnp.exe"
LOCK_A, LOCK_B = 0x7F3B10C4A1D0, 0x7F3B10C4A230


def plan():
    """Per task, in census order of first sight: (name, {census k: seen}),
    seen = (state, reason, object, holder name, cancels, unretrieved) or
    None when the task is gone (freed) from that census on."""
    W = lambda reason, obj=0, holder=None, cancels=0: (WAITING, reason, obj, holder, cancels, False)
    R = lambda cancels=0: (READY, 0, 0, None, cancels, False)
    X = (RUNNING, 0, 0, None, 0, False)
    D = lambda final, cancels=0, unretrieved=False: (final, 0, 0, None, cancels, unretrieved)
    return [
        ("main", {0: W(SLEEP, 0x7F3B10D00010)}),
        ("dl-a", {2: W(SLEEP, 0x7F3B10D00110), 5: W(LOCK, LOCK_B, "dl-b")}),
        ("dl-b", {2: W(SLEEP, 0x7F3B10D00210), 5: W(LOCK, LOCK_A, "dl-a")}),
        ("fan", {2: W(GATHER, 0x7F3B10D00310), 14: R(), 15: D(FINISHED)}),
        ("fan-0", {2: W(SLEEP, 0x7F3B10D00410), 7: D(FINISHED), 8: None}),
        ("fan-1", {2: W(SLEEP, 0x7F3B10D00510), 12: R(), 13: D(FINISHED), 16: None}),
        ("sleeper", {2: W(SLEEP, 0x7F3B10D00610), 20: R(1), 21: D(CANCELLED, 1), 23: None}),
        ("awaiter", {2: W(TASK, "sleeper"), 22: D(FINISHED), 24: None}),
        ("leaky", {2: W(FUTURE, 0x7F3B10D00810), 30: None}),
        ("failer", {2: W(SLEEP, 0x7F3B10D00910), 40: D(FAILED, 0, True), 41: None}),
        ("q-get", {2: W(QUEUE_GET, 0x7F3B10D00A10), 50: R(), 51: X,
                   54: W(QUEUE_GET, 0x7F3B10D00A10)}),
        (HOSTILE, {60: W(EVENT, 0x7F3B10D00B10), 70: R(), 71: D(FINISHED), 72: None}),
    ]


def lifecycle():
    """The events and tasks rows decode_asyncio.c's diff() and vanished()
    make of the censuses; ids in order of first sight; and each suspend as
    (task name, census, ts, task id), for its await chain."""
    tasks = plan()
    ids = {name: i + 1 for i, (name, _) in enumerate(tasks)}
    ev, rows, suspends = [], {}, []
    last = max(k for _, seen in tasks for k in seen)
    prev = {}                       # name -> (state, reason, a0, a1, cancels, unretrieved)
    for k in range(0, last + 1):
        ts = census(k)
        cur = {}
        for name, seen in tasks:    # what census k sees: the last sighting so far
            ks = [j for j in seen if j <= k]
            if ks and seen[max(ks)] is not None:
                cur[name] = seen[max(ks)]
        for name, p in prev.items():              # freed since the last census
            if name not in cur:
                tid = ids[name]
                if p[0] == FAILED and p[5]:
                    ev.append((ts, tid, LEAK, UNRETRIEVED, 0, 0))
                    rows[tid]["leak"] = UNRETRIEVED
                elif p[0] == WAITING:
                    ev.append((ts, tid, LEAK, ABANDONED, 0, 0))
                    rows[tid]["leak"] = ABANDONED
        for name, seen in tasks:
            if name not in cur:
                continue
            state, reason, obj, holder, cancels, unretrieved = cur[name]
            tid = ids[name]
            fresh = name not in prev
            pre = fresh and k == 0
            if fresh:
                rows[tid] = {"name": name, "created": ts, "pre": int(pre), "ended": None,
                             "final": None, "error": None, "leak": None}
                ev.append((ts, tid, CREATE, int(pre), 0, 0))
            was = prev.get(name, (0, 0, 0, 0, 0, False))
            a0 = a1 = 0
            if state == WAITING:
                a0 = ids[obj] if reason == TASK else obj
                a1 = ids[holder] if reason == LOCK else 0
            if cancels > was[4]:
                ev.append((ts, tid, CANCEL, 0, 0, 0))
            if (state, reason, a0, a1) != was[:4]:
                if state == RUNNING:
                    if was[0] == WAITING:
                        ev.append((ts, tid, WAKE, 0, 0, 0))
                    ev.append((ts, tid, RUN, 0, 0, 0))
                elif state == READY:
                    if was[0] in (WAITING, RUNNING):
                        ev.append((ts, tid, WAKE, 0, 0, 0))
                elif state == WAITING:
                    if was[0] != RUNNING and not pre:
                        ev.append((ts, tid, RUN, 0, 0, 0))
                    ev.append((ts, tid, SUSPEND, reason, a0, a1))
                    suspends.append((name, k, ts, tid))
                else:                               # done
                    if not pre and was[0] in (0, WAITING, READY):
                        ev.append((ts, tid, RUN, 0, 0, 0))
                    ev.append((ts, tid, FINISH, state, 0, 0))
                    rows[tid].update(ended=ts, final=state, error=0)
            cur[name] = (state, reason, a0, a1, cancels, unretrieved)
        prev = cur
    n = 0
    while census(n) < END:        # the censuses of the whole recording
        n += 1
    return ev, rows, ids, n, suspends


STACKS = {
    # time.sleep(0.033) in q-get's step
    1: [("clock_nanosleep@GLIBC_2.2.5", "linux/clock_nanosleep.c", 48, LIBC),
        ("pysleep", "./Modules/timemodule.c", 2159, PYTHON),
        ("time_sleep", "./Modules/timemodule.c", 383, PYTHON),
        ("handle_item", "/srv/worker/consume.py", 31, "python"),
        ("q_get", "/srv/worker/consume.py", 22, "python"),
        ("Task.__step_run_and_handle_result", ASYNCIO + "tasks.py", 303, "python"),
        ("Handle._run", ASYNCIO + "events.py", 84, "python"),
        ("BaseEventLoop._run_once", ASYNCIO + "base_events.py", 1936, "python"),
        ("BaseEventLoop.run_forever", ASYNCIO + "base_events.py", 608, "python"),
        ("<module>", "/srv/worker/main.py", 60, "python")],
    # Task-77 hashing a payload on the CPU
    2: [("_sha256_sha256_update", "./Modules/sha2module.c", 330, PYTHON),
        ("checksum", "/srv/worker/consume.py", 48, "python"),
        ("Task.__step_run_and_handle_result", ASYNCIO + "tasks.py", 303, "python"),
        ("Handle._run", ASYNCIO + "events.py", 84, "python"),
        ("BaseEventLoop._run_once", ASYNCIO + "base_events.py", 1936, "python"),
        ("<module>", "/srv/worker/main.py", 60, "python")],
}
TASK77 = 0x2E0C4F1D9A7B3C55   # the recorder's hash of a Task's address and name

# Await chains (await_stacks), innermost coroutine first, the task's own
# coroutine last; all Python frames.  Keyed by name, stored from stack 3 on.
P = lambda fn, file, line: (fn, file, line, "python")
LOCKS, APP = ASYNCIO + "locks.py", "/srv/worker/"
SLEEP_F = P("sleep", ASYNCIO + "tasks.py", 665)
CHAIN_STACKS = {
    "main": [SLEEP_F, P("main", APP + "main.py", 57)],
    "dl-a sleep": [SLEEP_F, P("transfer", APP + "ledger.py", 21)],
    "dl-b sleep": [SLEEP_F, P("transfer", APP + "ledger.py", 21)],
    "dl-a lock": [P("Lock.acquire", LOCKS, 113), P("_ContextManagerMixin.__aenter__", LOCKS, 14),
                  P("take_both", APP + "ledger.py", 9), P("transfer", APP + "ledger.py", 23)],
    "dl-b lock": [P("Lock.acquire", LOCKS, 113), P("_ContextManagerMixin.__aenter__", LOCKS, 14),
                  P("take_both", APP + "ledger.py", 10), P("transfer", APP + "ledger.py", 23)],
    "fan": [P("fan_out", APP + "main.py", 45)],
    "awaiter": [P("awaiter", APP + "main.py", 40)],
    "leaky": [P("Future.__await__", ASYNCIO + "futures.py", 287),
              P("wait_reply", APP + "rpc.py", 12), P("call", APP + "rpc.py", 30)],
    "q-get": [P("Queue.get", ASYNCIO + "queues.py", 158), P("q_get", APP + "consume.py", 20)],
    "hostile": [P("Event.wait", LOCKS, 213),
                P("ev\x1b[31mil\x1b[0m\n<b>&\"'{x|y}\u202efn", "/srv/\x1b[2Jev\til/\u202ex.py", 7)],
}


def chain_of(name, k):
    """The await chain key of name's suspend at census k, or None."""
    if name in ("dl-a", "dl-b"):
        return f"{name} {'sleep' if k < 5 else 'lock'}"
    if name == HOSTILE:
        return "hostile"
    return name if name in CHAIN_STACKS else None


def build():
    ev, rows, ids, ncensuses, suspends = lifecycle()
    s_sleep = census(51) - 2 * MS + 140 * US        # q-get's step, seen at censuses 51..53
    d_sleep = 33 * MS + 210 * US
    s_cpu = T0 + 1200 * MS + 410 * US
    d_cpu = 15 * MS + 62 * US
    rng = random.Random(20261204)
    g.END = END
    its = g.simulate(rng, T0 + 120 * US, 120 * US, 1500 * US,
                     [(s_sleep - 100 * US, d_sleep + 260 * US, None),
                      (s_cpu - 100 * US, d_cpu + 190 * US, None)])
    its = [(s, b, w) for s, b, w in its if s + b + w <= END - 5 * MS]

    out = [open(g.SCHEMA).read(), open(g.DERIVED).read()]
    for line in open(os.path.join(HERE, "fixtures", "lifecycle.sql")):
        m = re.match(r"INSERT INTO (\w+) VALUES", line)
        if m and m.group(1) in LOOKUPS:
            out.append(line.rstrip("\n"))
    # suspend_reasons, waker_kinds: the X-macro lists of evl-probes.h, as
    # tracer/store.c writes them (the lifecycle fixture's predate some)
    probes = open(PROBES).read()
    for table, macro in (("suspend_reasons", "EVL_SUSPEND_LIST"), ("waker_kinds", "EVL_WAKER_LIST")):
        body = probes[probes.index(f"#define {macro}(XX)"):]
        body = body[:body.index("\n\n")]
        for num, name in re.findall(r'XX\(\w+, (\d+), "(\w+)"\)', body):
            out.append(f"INSERT INTO {table} VALUES({num},{q(name)});")
    records = len(ev)
    meta = {
        "tool": "loopscope 0.1.0", "schema_version": "4", "host": "fixture",
        "kernel": "Linux (hand-made)", "clock": "CLOCK_MONOTONIC", "target_pid": str(PID),
        "target_binary": PYTHON, "target_cmdline": "python3 /srv/worker/main.py",
        "recorder_cmdline": f"record -p {PID} -o asyncio.db -d 1.5",
        "mode": "generic", "runtime": "CPython 3.12.1", "wait_calls": "epoll",
        "window_ns": str(g.WINDOW), "ringbuf_kb": "65536", "blocking_detection": "on",
        "syscalls": "off", "block_threshold_ns": str(10 * MS), "start_ns": str(T0),
        "end_ns": str(END), "duration_ns": str(END - T0), "start_utc": "2026-12-04T10:00:00Z",
        "end_utc": "2026-12-04T10:00:01Z", "stop_reason": "duration reached",
        "batches": "0", "records": str(records), "dropped_messages": "0", "dropped_bytes": "0",
        "dropped_events_claimed": "0", "rejected_records": "0", "rejected_messages": "0",
        "untracked_tasks": "0", "snapshot_request_failures": "0", "blocking_episodes": "2",
        "read_errors": "0", "lost_episodes": "0",
        "task_source": "census every 10 ms",
        "censuses": f"{ncensuses} (mean 0.412 ms; truncated 0, read errors 0)",
        "census_max_gap_ns": str(max(census(k + 1) - census(k) for k in range(ncensuses - 1))),
    }
    for k, v in sorted(meta.items()):
        out.append(f"INSERT INTO meta VALUES({q(k)},{q(v)});")
    out.append(f"INSERT INTO loops VALUES({MAIN},{PID},{MAIN},{its[0][0]},NULL);")
    for tid, r in sorted(rows.items()):
        out.append(f"INSERT INTO tasks VALUES({tid},{MAIN},NULL,{q(r['name'])},NULL,0,"
                   f"{r['created']},{r['pre']},{q(r['ended'])},{q(r['final'])},{q(r['error'])},"
                   f"{q(r['leak'])});")
    out.append(f"INSERT INTO tasks VALUES({TASK77},{MAIN},NULL,'Task-77',NULL,NULL,NULL,0,"
               "NULL,NULL,NULL,NULL);")
    for row in g.windows(its):
        out.append(f"INSERT INTO loop_windows VALUES({MAIN},{','.join(map(str, row))});")
    for lo, hi, n, ns in g.histogram(its):
        out.append(f"INSERT INTO iteration_hist VALUES({MAIN},{lo},{hi},{n},{ns});")
    for sid, frames in sorted(STACKS.items()):
        out.append(f"INSERT INTO stacks VALUES({sid},{len(frames)});")
        out += g.frames(sid, frames)
    chain_ids = {}
    for key, frames in CHAIN_STACKS.items():       # equal chains share a stack
        same = [i for k, i in chain_ids.items() if CHAIN_STACKS[k] == frames]
        if same:
            chain_ids[key] = same[0]
            continue
        sid = chain_ids[key] = len(STACKS) + 1 + len(set(chain_ids.values()))
        out.append(f"INSERT INTO stacks VALUES({sid},{len(frames)});")
        out += g.frames(sid, frames)
    for name, k, ts, tid in suspends:
        key = chain_of(name, k)
        if key:
            out.append(f"INSERT INTO await_stacks VALUES({tid},{ts},{chain_ids[key]});")
    out.append(f"INSERT INTO blocking VALUES(1,{MAIN},{ids['q-get']},{s_sleep},{d_sleep},"
               f"{OFF_CPU},{CLOCK_NANOSLEEP},1,0);")
    out.append(f"INSERT INTO blocking VALUES(2,{MAIN},{TASK77},{s_cpu},{d_cpu},{ON_CPU},NULL,"
               "2,0);")
    for ts, tid, kind, reason, arg0, arg1 in ev:            # in the order the diff made them
        out.append(f"INSERT INTO events VALUES({ts},{MAIN},{tid},{kind},{reason},{arg0},{arg1});")
    path = os.path.join(HERE, "fixtures", "asyncio.sql")
    with open(path, "w") as f:
        f.write("-- generated by tests/viewer/make_asyncio_fixture.py: edit that, not this\n")
        f.write("\n".join(out) + "\n")
    print(f"wrote {os.path.relpath(path)}: {len(rows) + 1} tasks, {len(ev)} events, "
          f"{len(its)} iterations, {len(g.windows(its))} windows")


if __name__ == "__main__":
    build()
