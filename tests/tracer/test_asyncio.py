#!/usr/bin/env python3
"""test_asyncio.py -- the asyncio task lifecycle of an unmodified CPython
process (tracer/decode_asyncio.c, tracer/pystack_tasks.c), recorded and
compared with the ground truth the target logs itself (needs root).

    test_asyncio.py CASE --loopscope BIN --python PY [--uvloop]

The target is tests/tracer/generic/asyncio_truth.py: named tasks in every
pattern asyncio has (queue, lock deadlock, a leaked task, gather, a
cancelled sleeper, a failed job nobody asks about, event / condition /
semaphore, awaiting a task, the executor, streams, a plain future), each
logging its creation, what it is about to wait on and its end with
time.monotonic_ns(), the trace's clock.  It makes no task before the
recorder says its probes are attached (SIGUSR2), so creation times are
the probe's.

Cases:
  lifecycle   every task that lived 50 ms or more, or is still pending at
              the end, has a row with its name and final state; created
              and ended within TOL of the truth; each wait the truth logs
              shows in the trace as a suspend with asyncio's reason; the
              leaked task and the unretrieved error have their verdicts;
              the lock deadlock's suspends name each other's holder; a task
              renamed after a census saw it has one row, with its new name.
  reuse       tasks made where just-freed ones were, their coroutines too
              (the target's --reuse): each has its own row and name.
  probe_rate  --task-probe-rate 5: the probes go off, the census goes on.
  no_tasks    --no-tasks: no census, no task rows but the episodes' (the
              blocking-only mode, as before the census).
"""
import json
import os
import signal
import subprocess
import sys
import time

from lstest import (Fail, check, eq, query, meta, integrity, wait_for, tmpdir, lost, parse_args,
                    run_case)

A = None
CASES = {}
HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = os.path.join(HERE, "generic", "asyncio_truth.py")
MS = 1_000_000
# Creation: the tp_init probe's time, against the factory's time.monotonic_ns()
# a few microseconds later.  End: the census sees a done task at its next
# census (every 10 ms, later when the recorder waits for the CPU: then
# within the widest gap between censuses, which the trace's meta says),
# or the tp_finalize probe when it is freed; the truth's done callback
# runs on the next loop iteration after the end.
TOL = 20 * MS

SUSPEND = {"sleep": 1, "stream_read": 2, "stream_drain": 2, "future": 3, "task": 4,
           "executor": 6, "gather": 7, "lock": 8, "event": 9, "condition": 10,
           "semaphore": 11, "queue_get": 12, "queue_put": 13}
FINAL = {"finished": 4, "failed": 5, "cancelled": 6}
LEAK_ABANDONED, LEAK_UNRETRIEVED = 2, 3
K_CREATE, K_SUSPEND, K_FINISH, K_LEAK = 3, 5, 7, 9


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def note(msg):
    print(f"  note: {msg}")


def record(*rec_args, target=()):
    """Run the target (with the arguments target) under the recorder: the
    trace, the truth (a list of dicts) and the target's stderr."""
    d = tmpdir()
    truth_path, db = os.path.join(d, "truth.json"), os.path.join(d, "trace.db")
    cmd = [A.python, TARGET, "--truth", truth_path, "--hold", "2", "--wait-go", *target]
    if A.uvloop:
        cmd.append("--uvloop")
    t = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        eq(t.stdout.readline().strip(), "waiting", "target's first line")
        r = subprocess.Popen([A.loopscope, "record", "-p", str(t.pid), "-o", db, *rec_args],
                             stderr=subprocess.PIPE, text=True)
        first = r.stderr.readline()
        check(first.startswith(f"recording pid {t.pid} "), f"record's first line: {first!r}")
        if "--no-tasks" not in rec_args:
            line = r.stderr.readline()
            while line.startswith("asyncio tasks: ") and "over --task-probe-rate" in line:
                line = r.stderr.readline()
            check(line.startswith("asyncio tasks: a census every") and "probed" in line,
                  f"record's second line: {line!r}")
        t.send_signal(signal.SIGUSR2)
        eq(t.stdout.readline().strip(), "ready", "target's ready line")
        _, terr = t.communicate(timeout=60)
        eq(t.returncode, 0, f"target exit status ({terr.strip()[-400:]})")
        _, err = r.communicate(timeout=60)
        eq(r.returncode, 0, f"record exit status ({err.strip()[-400:]})")
    finally:
        for p in (t,):
            if p.poll() is None:
                p.kill()
                p.wait()
    integrity(db)
    with open(truth_path) as f:
        truth = [json.loads(l) for l in f if l.strip()]
    return db, truth, terr


def truth_tasks(truth):
    """name -> {created, ended, state, waits, dropped, after}, for the named
    tasks (not asyncio's own "Task-N" / "None", which live a millisecond);
    dropped: when main dropped its last reference (leaky), else None;
    after: the times of what ends a wait early, besides the task's next
    wait and its end: main acting on it (a release, a cancel: it is ready
    from then on, however long the loop takes to run it) and blocker's
    block (it runs again)."""
    out = {}
    for e in truth:
        n = e.get("task")
        if not n or n.startswith("Task-") or n == "None":
            continue
        if e["ev"] == "create":
            out[n] = {"created": e["t"], "ended": None, "state": None, "waits": [],
                      "dropped": None, "after": []}
        elif e["ev"] == "done" and n in out:
            out[n]["ended"], out[n]["state"] = e["t"], e["state"]
        elif e["ev"] == "wait" and n in out:
            out[n]["waits"].append((e["t"], e["on"]))
        elif e["ev"] == "block" and n in out:
            out[n]["after"].append(e["t0"])
        elif e["ev"] == "act" and e["do"] == "rename":
            if e["target"] in out:
                out[e["to"]] = out.pop(e["target"])   # its row has the last name
        elif e["ev"] == "act":
            for target in e["target"].split():
                if target in out:
                    out[target]["after"].append(e["t"])
                    if e["do"] == "drop":
                        out[target]["dropped"] = e["t"]   # main drops a task it made
    return out


def unnamed(rows, t0):
    """The rows named '?' (a task no census saw, whose tp_finalize message
    came without its name), as (created, ended) in ms from t0."""
    return [(round((r["created"] - t0) / MS, 1),
             r["ended"] and round((r["ended"] - t0) / MS, 1)) for r in rows.get("?", [])]


def events_of(db, task_id, t0):
    """Task task_id's events, (ms since t0, kind, reason), for a failure."""
    return [(round((ts - t0) / MS, 1), k, a0) for ts, k, a0 in query(
        db, "SELECT ts_ns, kind, reason FROM events WHERE task_id = ? ORDER BY ts_ns", task_id)]


@case
def lifecycle():
    db, truth, terr = record()
    m = meta(db)
    check(m.get("task_source", "").startswith("census every 10 ms"), f"task_source {m.get('task_source')!r}")
    check("probes" in m.get("task_source", ""), "the tp_init/tp_finalize probes were attached")
    # a done task is seen at the next census: within one census gap, and
    # the recorder's share of the CPU sets the widest gap (meta)
    gap = int(m["census_max_gap_ns"])
    tol_end = max(TOL, gap + 5 * MS)
    rows = {}
    for tid, name, created, ended, final, leak in query(
            db, "SELECT id, name, created_ns, ended_ns, final_state, leak FROM tasks"):
        rows.setdefault(name, []).append(dict(id=tid, created=created, ended=ended, final=final,
                                              leak=leak))
    tt = truth_tasks(truth)
    run_delay = next(e.get("run_delay", 0) for e in truth if e["ev"] == "end")
    worst_c = worst_e = checked = 0
    for name, t in sorted(tt.items()):
        lived = (t["ended"] or 1 << 62) - t["created"]
        # a task's row comes from a census that sees it or from its
        # tp_finalize (tp_init only stamps its creation): one that lived
        # less than the widest gap between censuses and outlives the trace
        # (fan-0, 100 ms, kept by fan's frame) may have none (beside the
        # hogs the gap passed 0.6 s; tracer/SCHEMA.md, "Asyncio traces")
        if name == "main" or lived < max(50 * MS, gap):
            continue
        check(name in rows, f"task {name!r} has no row (rows: {sorted(rows)}); it lived "
                            f"{lived / MS:.1f} ms; rows named '?' (created, ended, ms from its "
                            f"creation): {unnamed(rows, t['created'])}; censuses "
                            f"{m.get('censuses')}, widest gap {gap / MS:.1f} ms, "
                            f"task_source {m.get('task_source')!r}")
        eq(len(rows[name]), 1, f"rows named {name!r}")
        r = rows[name][0]
        # the probe and the truth's line are a few instructions apart,
        # unless the loop thread lost its CPU between them: at most its
        # run delay (beside CPU hogs, 21 ms was seen)
        dc = abs(r["created"] - t["created"])
        check(dc <= TOL + run_delay, f"{name}: created {dc / MS:.1f} ms from the truth "
                                     f"(its run delay {run_delay / MS:.1f} ms)")
        worst_c = max(worst_c, dc)
        if t["state"]:
            eq(r["final"], FINAL[t["state"]], f"{name}'s final state")
            de = abs(r["ended"] - t["ended"])
            check(de <= tol_end, f"{name}: ended {de / MS:.1f} ms from the truth "
                                 f"(widest census gap {gap / MS:.1f} ms)")
            worst_e = max(worst_e, de)
        else:
            eq(r["final"], None, f"{name}'s final state (pending at the end)")
        # every wait of 50 ms or more shows as a suspend with its reason,
        # stamped within a census gap of the actual suspend; that comes
        # after the logged wait by as long as the loop thread then waited
        # for a CPU (beside CPU hogs, tens of ms): at most its run delay
        susp = query(db, "SELECT ts_ns, reason, arg0, arg1 FROM events WHERE task_id = ? AND kind = ?"
                         " ORDER BY ts_ns", r["id"], K_SUSPEND)
        for i, (wt, on) in enumerate(t["waits"]):
            # the wait ends at the next, at the task's end, when main acts
            # on it, or when it is dropped (and collected: no census sees
            # it after that).  It is parked for that long less the times
            # the loop thread waited for a CPU, before it parked and after
            # it was woken (at most its run delay): a census falls in it
            # only if that is longer than the widest gap
            nxt = min([t["waits"][i + 1][0] if i + 1 < len(t["waits"]) else
                       (t["ended"] or t["dropped"] or 1 << 62)] +
                      [a for a in t["after"] if a > wt])
            if nxt - wt - run_delay < max(50 * MS, tol_end):
                continue              # no census may have fallen in it
            checked += 1
            got = [s for s in susp if wt <= s[0] <= wt + tol_end + run_delay]
            check(any(s[1] == SUSPEND[on] for s in got),
                  f"{name}: its wait on {on} at +{(wt - t['created']) / MS:.1f} ms is not a "
                  f"suspend {SUSPEND[on]} within {(tol_end + run_delay) / MS:.1f} ms in the "
                  f"trace (its run delay {run_delay / MS:.1f} ms; suspends: "
                  f"{[(round((s[0] - t['created']) / MS, 1), s[1]) for s in susp]}; its events: "
                  f"{events_of(db, r['id'], t['created'])}; censuses {m.get('censuses')}, "
                  f"widest gap {gap / MS:.1f} ms)")
    # a task renamed after a census saw it: its one row has the new name
    check("renamee" not in rows, f"a row keeps renamee's first name: {rows.get('renamee')}")
    # verdicts
    eq(rows["leaky"][0]["leak"], LEAK_ABANDONED, "leaky's leak verdict")
    eq(rows["failer"][0]["leak"], LEAK_UNRETRIEVED, "failer's leak verdict")
    check("Task was destroyed but it is pending!" in terr, "the target logged leaky's end")
    # the deadlock: each waits for the lock the other holds
    a, b = rows["dl-a"][0]["id"], rows["dl-b"][0]["id"]
    for x, y in ((a, b), (b, a)):
        last = query(db, "SELECT reason, arg1 FROM events WHERE task_id = ? AND kind = ? "
                         "ORDER BY ts_ns DESC LIMIT 1", x, K_SUSPEND)
        eq(last, [(SUSPEND["lock"], y)], f"task {x}'s last suspend (lock, held by {y})")
    # their await chains, from the census that saw them park on the lock
    with open(TARGET) as f:
        at = next(i for i, l in enumerate(f, 1) if "# AT-DEADLOCK" in l)
    for x in (a, b):
        st = query(db, "SELECT f.function, f.file, f.line FROM await_stacks s "
                       "JOIN frames f ON f.stack_id = s.stack_id WHERE s.task_id = ? AND "
                       "s.ts_ns = (SELECT max(ts_ns) FROM await_stacks WHERE task_id = ?) "
                       "ORDER BY f.depth", x, x)
        check(st and st[0][0].endswith("acquire") and st[0][1].endswith("/asyncio/locks.py"),
              f"task {x}'s await chain starts in Lock.acquire: {st}")
        eq(st[-1], ("deadlock", TARGET, at), f"task {x}'s await chain ends in deadlock()")
    # the blocking episode of blocker names its task (uvloop too: from the
    # current-task dict, there is no Handle._run frame there)
    blk = [e for e in truth if e["ev"] == "block"]
    eq(len(blk), 1, "blocker's block in the truth")
    eps = query(db, "SELECT b.start_ns, b.dur_ns, t.name FROM blocking b "
                    "LEFT JOIN tasks t ON t.id = b.task_id")
    over = [e for e in eps if e[0] < blk[0]["t1"] and e[0] + e[1] > blk[0]["t0"]]
    check(over, f"an episode over blocker's time.sleep: {eps}{lost(m)}")
    eq({e[2] for e in over}, {"blocker"}, "the task of the episode over blocker's sleep")
    eq(len(rows["blocker"]), 1, "rows named blocker (the episode names the census's row)")
    note(f"{len(tt)} named tasks; worst creation error {worst_c / 1e3:.0f} us, "
         f"worst end error {worst_e / 1e3:.0f} us; censuses {m.get('censuses')}, "
         f"widest gap {gap / MS:.1f} ms; {checked} waits long enough to check for their "
         f"suspend (run delay {run_delay / MS:.1f} ms)")


@case
def reuse():
    """Round after round, 8 tasks freed and 8 made at once in their memory
    (asyncio_truth.py --reuse): a census that finds a task at a known
    task's address with the same coroutine address takes it for the known
    one unless the task's tp_init message says it is new; every such
    message is in before the census is diffed, so each task that a census
    must have seen has its own row, with its name, and its own suspend (a
    task taken for another has its row from its tp_finalize message, its
    suspend in the other's row).  The target must reuse memory that way at
    least once, or the case is not exercised."""
    db, truth, _ = record(target=("--reuse", "20"))
    m = meta(db)
    gap = int(m["census_max_gap_ns"])
    made, seen, reused = {}, set(), 0
    for e in truth:
        if e["ev"] == "create" and e["task"].startswith("r"):
            reused += (e["id"], e["coro"]) in seen
            seen.add((e["id"], e["coro"]))
            made[e["task"]] = [e["t"], None]
        elif e["ev"] == "done" and e["task"] in made:
            made[e["task"]][1] = e["t"]
    eq(len(made), 160, "tasks r<R>-<I> in the truth")
    check(reused, "no task was made at a freed task's address with its coroutine at the "
                  "freed one's: the case is not exercised")
    delay = {e["round"]: e["run_delay"] for e in truth if e["ev"] == "round"}
    rows = {}
    for tid, name, final in query(db, "SELECT id, name, final_state FROM tasks"):
        rows.setdefault(name, []).append((tid, final))
    checked = slept = 0
    for name, (t0, t1) in sorted(made.items()):
        check(t1, f"{name} ended in the truth")
        # as in lifecycle: a census may have missed a task that lived less
        # than the widest gap, and its sleep if it lasted less than that
        # after the loop thread's run delay over its round
        run_delay = delay[int(name[1:].split("-")[0])]
        if t1 - t0 < max(50 * MS, gap):
            continue
        checked += 1
        check(name in rows, f"task {name!r} has no row, though it lived {(t1 - t0) / MS:.1f} "
                            f"ms (widest census gap {gap / MS:.1f} ms); rows of this case: "
                            f"{sorted(n for n in rows if n.startswith('r'))}")
        eq([f for _, f in rows[name]], [FINAL["finished"]], f"{name}'s rows' final states")
        if t1 - t0 - run_delay < max(50 * MS, gap + 5 * MS):
            continue
        slept += 1
        tid = rows[name][0][0]
        check(query(db, "SELECT count(*) FROM events WHERE task_id = ? AND kind = ? AND "
                        "reason = ?", tid, K_SUSPEND, SUSPEND["sleep"])[0][0],
              f"{name} (row {tid}) has no suspend on its sleep: its events "
              f"{events_of(db, tid, t0)}")
    note(f"{reused} of 160 tasks made where a freed task and its coroutine were; "
         f"{checked} checked for their row, {slept} for their suspend (widest census gap "
         f"{gap / MS:.1f} ms, run delay per round up to {max(delay.values()) / MS:.1f} ms)")


@case
def probe_rate():
    """--task-probe-rate 5: the target makes its ~30 tasks faster than that,
    so the probes go off (said, and in meta) and the census goes on alone:
    the long-lived tasks still have their rows and final states."""
    db, truth, _ = record("--task-probe-rate", "5")
    src = meta(db).get("task_source", "")
    check(src.startswith("census every 10 ms, tp_init/tp_finalize probes until +") and
          "(over 5 tasks made a second)" in src, f"task_source {src!r}")
    rows = dict(query(db, "SELECT name, final_state FROM tasks"))
    for name, state in (("dl-a", None), ("q-get", None), ("fan", FINAL["finished"]),
                        ("sleeper", FINAL["cancelled"])):
        check(name in rows, f"{name} has a row: {sorted(rows)}")
        eq(rows[name], state, f"{name}'s final state")


@case
def no_tasks():
    db, truth, _ = record("--no-tasks")
    m = meta(db)
    eq(m.get("task_source"), "none", "task_source with --no-tasks")
    eq(query(db, "SELECT count(*) FROM events WHERE kind = ?", K_CREATE), [(0,)],
       "task_create events with --no-tasks")


if __name__ == "__main__":
    A = parse_args(CASES, ["loopscope", "python"],
                   extra=[("--uvloop", dict(action="store_true"))])
    sys.exit(run_case(CASES, A))
