#!/usr/bin/env python3
"""make_rules_fixture.py -- write tests/viewer/fixtures/rules.sql, a small
hand-made trace on which the lint rules that no recorded fixture triggers
fire, each once: lost-wakeup (its three cases), unretrieved-error (both
cases), self-wake, lossy-trace and deadlock (two wait-for cycles: two tasks
awaiting each other, and two tasks each waiting for a lock the other
holds), which graph --kind tasks draws too, with a queue handoff (a
consumer woken by the producer's put: a "woken by" edge).

The recorded fixtures (make_fixtures.sh) cannot show these: libevl has no
such bugs to record on purpose.  The trace is built from tracer/schema.sql
with the lookup tables copied from the lifecycle fixture (what
tracer/store.c writes; the suspend reasons and waker kinds from
loop/include/evl-probes.h, as store.c does), so it is a trace the recorder
could have written.
Rerun after a schema change, then refresh the goldens (run_golden.py
--update) and review their diff.
"""
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = os.path.join(HERE, "..", "..", "tracer", "schema.sql")
DERIVED = os.path.join(HERE, "..", "..", "model", "derived.sql")
PROBES = os.path.join(HERE, "..", "..", "loop", "include", "evl-probes.h")
LOOKUPS = ("event_kinds", "states", "leak_kinds", "blocking_kinds", "syscalls")

T0 = 5_000_000_000            # recording start (CLOCK_MONOTONIC ns)
MS = 1_000_000
END = T0 + 1000 * MS

# kinds, reasons (tracer/SCHEMA.md)
CREATE, RUN, SUSPEND, WAKE, FINISH, CANCEL, LEAK = 3, 4, 5, 6, 7, 8, 9
SLEEP, FUTURE, TASK, LOCK, QUEUE_GET = 1, 3, 4, 8, 12   # suspend reasons
W_TIMER, W_FUTURE, W_QUEUE = 1, 3, 13             # waker kinds
FINISHED, FAILED = 4, 5                           # states
UNRETRIEVED = 3                                   # leak kinds


def q(v):
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return str(v)


def main():
    out = [open(SCHEMA).read(), open(DERIVED).read()]
    for line in open(os.path.join(HERE, "fixtures", "lifecycle.sql")):
        m = re.match(r"INSERT INTO (\w+) VALUES", line)
        if m and m.group(1) in LOOKUPS:
            out.append(line.rstrip("\n"))
    # suspend_reasons, waker_kinds: the X-macro lists of evl-probes.h
    probes = open(PROBES).read()
    for table, macro in (("suspend_reasons", "EVL_SUSPEND_LIST"), ("waker_kinds", "EVL_WAKER_LIST")):
        body = probes[probes.index(f"#define {macro}(XX)"):]
        body = body[:body.index("\n\n")]
        for num, name in re.findall(r'XX\(\w+, (\d+), "(\w+)"\)', body):
            out.append(f"INSERT INTO {table} VALUES({num},{q(name)});")
    meta = {
        "tool": "loopscope 0.1.0", "schema_version": "1", "host": "fixture",
        "kernel": "Linux (hand-made)", "clock": "CLOCK_MONOTONIC", "target_pid": "4242",
        "target_binary": "/opt/rules/rules", "target_cmdline": "/opt/rules/rules --bugs",
        "mode": "batched", "ringbuf_kb": "64", "start_ns": str(T0), "end_ns": str(END),
        "duration_ns": str(END - T0), "start_utc": "2026-12-01T10:00:00Z",
        "end_utc": "2026-12-01T10:00:01Z", "stop_reason": "duration reached",
        "blocking_detection": "on", "block_threshold_ns": str(10 * MS), "syscalls": "off",
        "batches": "40", "blocking_episodes": "0",
        # lossy: what the recorder counted, and what the target claims
        "dropped_messages": "3", "dropped_bytes": str(192 * 1024), "rejected_records": "2",
        "read_errors": "0", "dropped_events_claimed": "4812",
    }
    for k, v in sorted(meta.items()):
        out.append(f"INSERT INTO meta VALUES({q(k)},{q(v)});")
    out.append(f"INSERT INTO loops VALUES(1,4242,4242,{T0},NULL);")

    ev = [(T0, None, 1, 4242, None, None)]        # loop_start
    tasks = {}

    def task(tid, name, parent, at_ms, steps, final=None, error=None, leak=None):
        """steps: (ms, kind, reason, arg0, arg1) after the create at at_ms."""
        created = T0 + at_ms * MS
        ev.append((created, tid, CREATE, 0, parent or 0, 0x401000 + tid * 16))
        ended = None
        for ms, kind, reason, arg0, arg1 in steps:
            ev.append((T0 + int(ms * MS), tid, kind, reason, arg0, arg1))
            if kind == FINISH:
                ended = T0 + int(ms * MS)
        tasks[tid] = (name, parent, created, ended, final, error, leak)

    # Every step is short (each task waits, ready, until just before its
    # event), so never-yields stays quiet.
    # 1 main: spawns everything, sleeps until the end
    task(1, "main", None, 1, [(1.01, RUN, None, None, None),
                              (2, SUSPEND, SLEEP, T0 + 900 * MS, 898 * MS),
                              (900, WAKE, W_TIMER, 0, None), (900.01, RUN, None, None, None),
                              (900.1, FINISH, FINISHED, 0, None)], FINISHED, 0)
    # 2 lost-wakeup (a): woken by its timer, never runs again
    task(2, "woken_never_ran", 1, 10, [(29.9, RUN, None, None, None),
                                       (30, SUSPEND, SLEEP, T0 + 100 * MS, 70 * MS),
                                       (100, WAKE, W_TIMER, 0, None)])
    # 3 lost-wakeup (b): awaits task 4, which finishes; 3 is never woken
    task(3, "awaits_finished", 1, 11, [(49.9, RUN, None, None, None),
                                       (50, SUSPEND, TASK, 4, 0)])
    task(4, "quick_child", 1, 40, [(59.9, RUN, None, None, None),
                                   (60, FINISH, FINISHED, 0, None)], FINISHED, 0)
    # 5 lost-wakeup (c): cancelled while asleep, never woken
    task(5, "cancelled_sleeper", 1, 12, [(19.9, RUN, None, None, None),
                                         (20, SUSPEND, SLEEP, T0 + 5000 * MS, 4980 * MS),
                                         (200, CANCEL, None, 1, None)])
    # 6 unretrieved-error, libevl's verdict
    task(6, "unread_failure", 1, 13, [(299.9, RUN, None, None, None),
                                      (300, FINISH, FAILED, -5, None),
                                      (310, LEAK, UNRETRIEVED, None, None)], FAILED, -5, UNRETRIEVED)
    # 7 unretrieved-error: failed, and no task awaited it
    task(7, "fire_and_forget", 1, 14, [(399.9, RUN, None, None, None),
                                       (400, FINISH, FAILED, -104, None)], FAILED, -104)
    # 8 self-wake: completes the future it awaits from inside its own step
    task(8, "self_waker", 1, 15, [(499.9, RUN, None, None, None),
                                  (500, SUSPEND, FUTURE, 0x7f0000001000, 0),
                                  (510, WAKE, W_FUTURE, 8, None), (510.01, RUN, None, None, None),
                                  (510.1, FINISH, FINISHED, 0, None)], FINISHED, 0)
    # 9, 10: a wait-for cycle (each awaits the other), pending at the end
    task(9, "philosopher_a", 1, 16, [(599.9, RUN, None, None, None), (600, SUSPEND, TASK, 10, 0)])
    task(10, "philosopher_b", 1, 17, [(600.9, RUN, None, None, None), (601, SUSPEND, TASK, 9, 0)])
    # 11, 12: a deadlock over two locks: each holds one (taken without
    # waiting: no event) and waits for the other's (suspend reason lock,
    # arg0 the lock, arg1 its holder), pending at the end
    task(11, "transfer_a_to_b", 1, 18, [(699.9, RUN, None, None, None),
                                        (700, SUSPEND, LOCK, 0x7f0000002000, 12)])
    task(12, "transfer_b_to_a", 1, 19, [(700.4, RUN, None, None, None),
                                        (700.5, SUSPEND, LOCK, 0x7f0000001000, 11)])
    # 13, 14: a queue handoff: the consumer waits for an item (reason
    # queue_get), the producer's put wakes it (waker kind queue, arg0 the
    # producer); both finish
    task(13, "consumer", 1, 20, [(799.9, RUN, None, None, None),
                                 (800, SUSPEND, QUEUE_GET, 0x7f0000003000, 0),
                                 (810.05, WAKE, W_QUEUE, 14, None), (810.1, RUN, None, None, None),
                                 (810.2, FINISH, FINISHED, 0, None)], FINISHED, 0)
    task(14, "producer", 1, 21, [(809.9, RUN, None, None, None),
                                 (810.1, FINISH, FINISHED, 0, None)], FINISHED, 0)

    for tid, (name, parent, created, ended, final, error, leak) in sorted(tasks.items()):
        out.append(f"INSERT INTO tasks VALUES({tid},1,{q(parent)},{q(name)},{q(name)},"
                   f"{0x401000 + tid * 16},{created},0,{q(ended)},{q(final)},{q(error)},{q(leak)});")
    # task_stats as the recorder computes them (spans until the next event)
    by_task = {}
    for ts, tid, kind, reason, arg0, arg1 in sorted(ev, key=lambda e: e[0]):
        if tid is not None and kind in (CREATE, RUN, SUSPEND, WAKE, FINISH):
            by_task.setdefault(tid, []).append((ts, kind))
    for tid in sorted(tasks):
        lst = by_task[tid] + [(END, None)]
        busy = sched = idle = longest = 0
        resumes = sum(1 for _, k in lst if k == RUN)
        wakes = sum(1 for _, k in lst if k == WAKE)
        for (ts, kind), (nts, _) in zip(lst, lst[1:]):
            if kind == RUN:
                busy += nts - ts
                longest = max(longest, nts - ts)
            elif kind in (CREATE, WAKE):
                sched += nts - ts
            elif kind == SUSPEND:
                idle += nts - ts
            elif kind == FINISH:
                break
        out.append(f"INSERT INTO task_stats VALUES({tid},{busy},{sched},{idle},{resumes},{wakes},"
                   f"{longest},0,0);")
    for ts, tid, kind, reason, arg0, arg1 in sorted(ev, key=lambda e: e[0]):
        out.append(f"INSERT INTO events VALUES({ts},1,{q(tid)},{kind},{q(reason)},{q(arg0)},"
                   f"{q(arg1)});")
    out.append("CREATE INDEX tasks_loop ON tasks(loop_id);")
    path = os.path.join(HERE, "fixtures", "rules.sql")
    with open(path, "w") as f:
        f.write("-- generated by tests/viewer/make_rules_fixture.py: edit that, not this\n")
        f.write("\n".join(out) + "\n")
    print(f"wrote {os.path.relpath(path)}: {len(tasks)} tasks, {len(ev)} events")


if __name__ == "__main__":
    main()
