#!/usr/bin/env python3
"""test_pytasks_hostile.py -- the asyncio task census (tracer/pystack_tasks.c,
pytasks.h) against a CPython that corrupts its own asyncio objects.

    test_pytasks_hostile.py CASE --python PY --loopscope LOOPSCOPE

generic/pytasks_hostile_target.py, run under PY, sets up healthy tasks and
a scenario's victims, corrupts the victims with ctypes (writes at id(obj)
+ pyt_layout's offsets, each field read back and checked first) and stays
parked.  Against each, `loopscope ps PID`, `ps --tree PID`, `ps --json PID`
and `loopscope record -p PID -d 1` must end within BOUND seconds (a hang
guard, not a speed check), by exit 0 or a clean one-line error (never a
signal, never a sanitizer report), with valid UTF-8, no raw control
character on the terminal and JSON that parses; where the census can read
the task set, the healthy tasks must be listed as they are (state, reason,
object, held lock, innermost frame) next to the victims, and each victim
must show the path it took (a "?" name, chain_cut, its own id as the
awaited task, left out, the truncation flag...).  The cases:

    cycles    a real await cycle (ac-1/ac-2 in the cycles); chains forced
              into loops by a frame's stack top (chain_cut, <= 64 frames)
    names     task_name an int (huge, negative, 7), a bytes, garbage,
              unmapped, freed, NULL; str length 2**40 and 2**30, kind 3;
              lone surrogates, NUL, controls, 100 000 characters
    fields    task_coro -> itself / garbage / freed / NULL; fut_waiter -> the
              task itself / an int / garbage; fut_state 7 and -1 (left out);
              num_cancels -5 (0) and 2**31-1
    many      200 000 tasks (or what the target makes in 8 s, at least
              70 000): truncated at LS_PYT_MAX_TASKS, the reader's memory
              bounded (RSS_MB)
    sets      3.10-3.13: the task WeakSet swapped for a copy with a set
              mask of 1000, of 2**40-1, a table pointer to unmapped memory,
              a list for a set, its `data` after 100 000 other attributes
              (past PYT_DICT_MAX), an int for the WeakSet: a clean error,
              or (2**40-1) the healthy tasks; the current-task dict's keys
              object claiming 2**40 entries: the healthy tasks
    entries   3.10-3.13: weakrefs to non-tasks, a dead weakref, an int, a
              str in the real set (3.12+: the eager set too): only the
              tasks listed
    forged    64 forged Tasks (random fields, forged coroutines, frames
              and str names) behind weakrefs of the real set (3.14+: in the
              loop thread's list, some of their nodes' next fuzzed too),
              SEEDS seeds
    shared    65000 tasks whose coroutine is one chain of 1000 coroutines,
              or a FutureIter that is its own future: every command within
              BOUND (the census's step budget), the healthy tasks whole
    stack     a frame's stack top 100000, -5, 4095 (3.14+: its
              stackpointer so many slots up; also NULL, unaligned: the chain
              stops there; yf_depth slots up: the first local, an int, is
              what it awaits; a tag bit on the awaited object's stackref,
              3.15 garbage as the value sent: the chain whole); a chain of
              1000 coroutines (its innermost frames kept, cut) and of 5000
              (beyond LS_PYT_WALK: cut, 64 frames)
    lists     3.14+ (its tasks in a list per thread, not a WeakSet): each
              list ended once, by a next that is NULL, unmapped, garbage,
              a garbage head: read_error, the tasks before it listed, the
              others of that list not, the other lists whole; nodes of an
              int and a Future subclass in a list: skipped; the tasks of
              threads that ended (the interpreter's list); the running task
              of a thread state: a task of it (running), garbage, unmapped,
              an int, a task in no list (not listed)
    loops     3.14+: a list that never comes back to its head (a task's next
              itself, an earlier task, a task of another thread's list; the
              interpreter's list, read first: then nothing after it is):
              truncated, each task once, the healthy tasks as they are
    flip      3.14+: a node's next flipped among those while ps and record
              read, tasks made and ended without pause in another thread
              (the tasks of the census before that left the lists read
              again): the healthy tasks in every census
    dbg       3.14+: _asyncio's .AsyncioDebug offsets rewritten (the node at
              0: no task; a task size of 2**40: a clean error; random
              offsets within the census's bounds)
    exit      the target SIGKILLed at random moments of a census (ps and
              record): exit 0 with a whole snapshot or a clean error
    all       every case above, in ORDER (what ctest runs); a case for
              other versions than PY's says so and passes

Run it from build/ and build-asan/ (label fuzz: tests/run.sh runs it
there, under ASan+UBSan).  `record` needs root: not root, it is left out
(said so; CI=true: a failure).  Exit 0 = pass, 1 = fail, 77 = skip (PY not
installed; under CI=true that fails instead).
"""
import json
import os
import random
import re
import selectors
import subprocess
import sys
import time

from lstest import Fail, Skip, check, eq, query, integrity, tmpdir, parse_args, run_case

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = os.path.join(HERE, "generic", "pytasks_hostile_target.py")
BOUND = 30                      # seconds for any one command: a hang guard
MAX_TASKS = 65536               # pytasks.h LS_PYT_MAX_TASKS
MAX_DEPTH = 64                  # LS_PYT_MAX_DEPTH
RSS_MB = 512                    # peak RSS of ps and record on 200 000 tasks (x3 under
                                # ASan: its quarantine keeps 256 MB of what was freed)
SEEDS = (1, 2, 3, 4)
SUPP = os.path.join(HERE, "..", "lsan.supp")
os.environ.setdefault("LSAN_OPTIONS", f"suppressions={os.path.abspath(SUPP)}")
PROCS = []
A = None
CASES = {}


def case(fn):
    CASES[fn.__name__.rstrip("_")] = fn     # all_, exit_: not the builtins
    return fn


def note(msg):
    print(f"  {msg}", flush=True)


_LISTS = []


def lists_python():
    """Does A.python keep its tasks in lists (3.14+), not in a WeakSet?"""
    if not _LISTS:
        r = subprocess.run([A.python, "-c", "import sys; print(sys.version_info >= (3, 14))"],
                           capture_output=True, text=True, timeout=60)
        eq(r.returncode, 0, f"{A.python}: its version ({r.stderr[-500:]!r})")
        _LISTS.append(r.stdout.strip() == "True")
    return _LISTS[0]


def sanitized():
    with open(A.loopscope, "rb") as f:
        return b"__asan_init" in f.read()


# ---------------------------------------------------------------- processes

def start(scenario, *args, timeout=120):
    """The target running scenario; returns (Popen, its ready report)."""
    d = tmpdir()
    err = open(os.path.join(d, "stderr"), "w+")
    p = subprocess.Popen([A.python, TARGET, scenario, *map(str, args)], stdout=subprocess.PIPE,
                         stderr=err, text=True)
    PROCS.append(p)
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    line = ""
    end = time.monotonic() + timeout
    while time.monotonic() < end and not line:
        if sel.select(timeout=1):
            line = p.stdout.readline()
        elif p.poll() is not None:
            break
    sel.close()
    try:
        ready = json.loads(line)
    except ValueError:
        ready = {"error": f"no report: {line!r}"}
    if "error" in ready:
        err.seek(0)
        raise Fail(f"target {scenario} under {A.python}: {ready['error']}; exit {p.poll()}; "
                   f"stderr {err.read()[-3000:]!r}")
    return p, ready


def stop(p):
    if p.poll() is None:
        p.kill()
    p.wait()


def cleanup():
    while PROCS:
        stop(PROCS.pop())


class Run:
    """A command's outcome: rc (negative: the signal), out, err (str),
    secs, rss_mb (peak)."""


def run(argv, bound=BOUND, kill_at=None, victim=None):
    """argv to its end, at most bound seconds (then killed: a Fail).
    kill_at: seconds after which victim (a Popen) is SIGKILLed."""
    d = tmpdir()
    fo, fe = open(os.path.join(d, "out"), "w+b"), open(os.path.join(d, "err"), "w+b")
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=fo, stderr=fe)
    status = ru = None
    killed = False
    while True:
        pid, st, r = os.wait4(p.pid, os.WNOHANG)
        if pid:
            status, ru = st, r
            break
        now = time.monotonic() - t0
        if kill_at is not None and not killed and now >= kill_at:
            victim.kill()
            killed = True
        if now > bound:
            p.kill()
            os.wait4(p.pid, 0)
            p.returncode = -9
            fe.seek(0)
            raise Fail(f"{' '.join(argv[1:])}: still running after {bound} s (a hang); "
                       f"stderr {fe.read()[-2000:]!r}")
        time.sleep(0.002)
    r = Run()
    r.secs = time.monotonic() - t0
    r.rc = p.returncode = os.waitstatus_to_exitcode(status)
    r.rss_mb = ru.ru_maxrss / 1024
    if kill_at is not None and not killed:
        victim.kill()
    fo.seek(0)
    fe.seek(0)
    what = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv))
    raw_out, raw_err = fo.read(), fe.read()
    try:
        r.out, r.err = raw_out.decode("utf-8"), raw_err.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Fail(f"{what}: output is not UTF-8 ({e}): {raw_out[-500:]!r} {raw_err[-500:]!r}")
    check(r.rc >= 0, f"{what}: killed by signal {-r.rc}; stderr {r.err[-3000:]!r}")
    for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehavior",
                   "Sanitizer"):
        check(marker not in r.err, f"{what}: sanitizer report:\n{r.err[-4000:]}")
    r.what = what
    return r


def no_raw_controls(text, what):
    """Text for a terminal: no ESC, no C0 control but newline, no C1, no
    bidi override."""
    for ch in text:
        c = ord(ch)
        if (c < 0x20 and ch != "\n") or c == 0x7f or 0x80 <= c < 0xa0 \
                or 0x202a <= c <= 0x202e or 0x2066 <= c <= 0x2069:
            raise Fail(f"{what}: raw control character U+{c:04X} in the output")


# ---------------------------------------------------------------- ps

PS_ERRORS = (r"loopscope ps: pid \d+: CPython [0-9.]+: cannot read its tasks",
             r"loopscope ps: pid \d+: no asyncio in this process \(not imported yet\)",
             r"loopscope ps: process \d+ exited during the census",
             r"loopscope ps: no such process: \d+",
             r"loopscope ps: pid \d+: not CPython.*",
             r"loopscope ps: pid \d+: .*")
PS_NOTES = (r"loopscope ps: note: more than \d+ tasks: the rest are not shown",
            r"loopscope ps: note: some tasks changed while they were read and are not shown")


def ps(pid, *args, errors=(), bound=BOUND):
    """`loopscope ps ARGS PID`: a Run, checked: exit 0 (stderr: notes only)
    or exit 1 with one line matching one of errors (regexes)."""
    r = run([A.loopscope, "ps", *args, str(pid)], bound=bound)
    lines = r.err.splitlines()
    if r.rc == 0:
        for l in lines:
            check(any(re.fullmatch(n, l) for n in PS_NOTES), f"{r.what}: stderr line {l!r}")
    else:
        eq(r.rc, 1, f"{r.what}: exit status (stderr {r.err[-2000:]!r})")
        check(len(lines) == 1 and r.err.endswith("\n"), f"{r.what}: one line on stderr: {r.err!r}")
        check(any(re.fullmatch(e, lines[0]) for e in errors),
              f"{r.what}: unexpected error {lines[0]!r}")
        eq(r.out, "", f"{r.what}: stdout on an error")
    if r.rc == 0 and "--json" not in args:
        no_raw_controls(r.out, r.what)
    return r


def js_of(r):
    try:
        js = json.loads(r.out)
    except ValueError as e:
        raise Fail(f"{r.what}: not JSON ({e}): {r.out[:1000]!r} ... {r.out[-1000:]!r}")
    for k in ("pid", "python", "census_ns", "truncated", "read_error", "tasks", "cycles"):
        check(k in js, f"{r.what}: no {k!r}")
    ids = set()
    for t in js["tasks"]:
        for k, ty in (("id", str), ("name", str), ("state", str), ("held", list),
                      ("cancels", int), ("unretrieved", bool), ("chain_cut", bool),
                      ("stack", list)):
            check(isinstance(t.get(k), ty), f"{r.what}: task {t.get('id')}: {k} {t.get(k)!r}")
        check(t["id"] not in ids, f"{r.what}: task {t['id']} twice")
        ids.add(t["id"])
        check(len(t["stack"]) <= MAX_DEPTH, f"{r.what}: {t['id']}: {len(t['stack'])} frames")
        check(len(t["name"].encode("utf-8", "surrogatepass")) <= 255,
              f"{r.what}: {t['id']}: a name of {len(t['name'].encode())} bytes")
        check(t["state"] in ("ready", "running", "waiting", "finished", "failed", "cancelled"),
              f"{r.what}: {t['id']}: state {t['state']!r}")
        for f in t["stack"]:
            check(isinstance(f.get("function"), str) and isinstance(f.get("file"), str)
                  and isinstance(f.get("line"), int), f"{r.what}: {t['id']}: frame {f!r}")
    return js


def table_ids(r):
    """{id: the rest of its row} of `ps`'s table."""
    rows = r.out.splitlines()
    check(rows and re.fullmatch(r"pid \d+  CPython \S+  \d+ tasks?  \(census in [0-9.]+ ms\)",
                                rows[0]), f"{r.what}: header {rows[:1]!r}")
    out = {}
    for row in rows[2:]:
        m = re.match(r"(0x[0-9a-f]+)  (.*)", row)
        if m:
            out[m.group(1)] = m.group(2)
    return out


HEALTHY = {   # name -> (reason, innermost frame of the target)
    "ok-sleep": ("sleep", "sleep_body"),
    "ok-holder": ("event", "holder_body"),
    "ok-lock": ("lock", "lock_body"),
    "ok-awaiter": ("task", "awaiter_body"),
    "main": ("future", "scenario"),
}


def check_healthy(js, ready, what):
    """The healthy tasks, as they are, among whatever else is listed."""
    ids = {**ready["healthy"], "main": ready["main"]}
    byid = {t["id"]: t for t in js["tasks"]}
    for n, (reason, func) in HEALTHY.items():
        t = byid.get(ids[n])
        check(t, f"{what}: healthy task {n} ({ids[n]}) not listed")
        eq((t["name"], t["state"], t["reason"], t["chain_cut"]), (n, "waiting", reason, False),
           f"{what}: {n}")
        app = [f["function"] for f in t["stack"] if f["file"] == TARGET]
        check(app and app[-1] == func, f"{what}: {n}: innermost frame {app[-1:]}, not {func}")
    eq(byid[ids["ok-awaiter"]]["object"], ids["ok-sleep"], f"{what}: ok-awaiter awaits ok-sleep")
    lock = byid[ids["ok-lock"]]["object"]
    eq(byid[ids["ok-holder"]]["held"], [lock], f"{what}: ok-holder holds ok-lock's lock")
    eq(byid[ids["ok-lock"]]["held"], [], f"{what}: ok-lock holds nothing")


def census(p, ready, what, healthy=True, errors=()):
    """ps, ps --tree, ps --json on the target: the JSON (None on a clean
    error); healthy: the healthy tasks must be there, in all three."""
    rj = ps(p.pid, "--json", errors=errors)
    rt = ps(p.pid, errors=errors)
    rr = ps(p.pid, "--tree", errors=errors)
    check(p.poll() is None, f"{what}: the target died")
    note(f"{what}: ps {rt.rc} ({rt.secs:.2f} s), --tree {rr.rc}, --json {rj.rc} "
         f"({rj.secs:.2f} s, {rj.rss_mb:.0f} MB)")
    if rj.rc:
        check(not healthy, f"{what}: ps --json failed: {rj.err!r}")
        return None
    js = js_of(rj)
    eq(js["pid"], p.pid, f"{what}: pid")
    if healthy:
        check_healthy(js, ready, what)
        if rt.rc == 0:
            rows = table_ids(rt)
            for n, i in {**ready["healthy"], "main": ready["main"]}.items():
                check(i in rows and rows[i].startswith(n + " "), f"{what}: table row of {n}: "
                      f"{rows.get(i)!r}")
        if rr.rc == 0:
            for n, i in {**ready["healthy"], "main": ready["main"]}.items():
                check(f"{n}  ({i})  waiting" in rr.out, f"{what}: --tree: no line of {n}")
    js["tree"] = rr.out
    return js


def record(p, ready, what, healthy=True, bound=2 * BOUND, rss=None):
    """`loopscope record -p PID -d 1`: exit 0 within bound, a trace that
    passes integrity_check; healthy: their names in its tasks table."""
    if os.geteuid() != 0:
        check(os.environ.get("CI") != "true", "not root: record cannot run (CI=true)")
        note(f"{what}: not root: record skipped")
        return
    db = os.path.join(tmpdir(), "trace.db")
    r = run([A.loopscope, "record", "-q", "-p", str(p.pid), "-d", "1", "-o", db], bound=bound)
    eq(r.rc, 0, f"{what}: {r.what}: exit status (stderr {r.err[-2000:]!r})")
    check(p.poll() is None, f"{what}: the target died during record")
    check(rss is None or r.rss_mb < rss, f"{what}: record: peak RSS {r.rss_mb:.0f} MB > {rss} MB")
    integrity(db)
    names = {n for (n,) in query(db, "SELECT name FROM tasks")}
    note(f"{what}: record 0 ({r.secs:.2f} s, {r.rss_mb:.0f} MB, {len(names)} tasks)")
    if healthy:
        for n in HEALTHY:
            check(n in names, f"{what}: record: healthy task {n} not in the trace ({sorted(names)[:20]})")
    return names


def byid_of(js):
    return {t["id"]: t for t in js["tasks"]}


def scenario(name, *args, healthy=True, errors=(), rec=True):
    """Start the target, take the three censuses and a record; returns
    (ready, json or None)."""
    p, ready = start(name, *args)
    try:
        js = census(p, ready, name, healthy=healthy, errors=errors)
        if rec:
            record(p, ready, name, healthy=healthy and js is not None)
            if js is not None:
                # the target is unchanged by being read: the same tasks again
                js2 = js_of(ps(p.pid, "--json", errors=errors))
                eq(sorted(t["id"] for t in js2["tasks"]), sorted(t["id"] for t in js["tasks"]),
                   f"{name}: the tasks after record")
    finally:
        stop(p)
    return ready, js


# ---------------------------------------------------------------- cases

@case
def cycles():
    ready, js = scenario("cycles")
    v, t = ready["victims"], byid_of(js)
    a1, a2 = t[v["ac-1"]["id"]], t[v["ac-2"]["id"]]
    eq((a1["reason"], a1["object"], a2["reason"], a2["object"]),
       ("task", v["ac-2"]["id"], "task", v["ac-1"]["id"]), "ac-1 and ac-2 await each other")
    check(sorted(["ac-1", "ac-2"]) in [sorted(c) for c in js["cycles"]],
          f"the await cycle in cycles: {js['cycles']}")
    for n, frames in (("cyc-first", 3), ("cyc-mid", MAX_DEPTH), ("cyc-self", MAX_DEPTH)):
        x = t[v[n]["id"]]
        # the chain came back to a coroutine already walked: cut there, the
        # task's future (its waiter) what it waits on
        eq((x["name"], x["state"], x["chain_cut"], len(x["stack"]), x["object"], x["reason"]),
           (n, "waiting", True, frames, v[n]["fut"], "future"), f"{n}: the looped chain")
        check(all(f["function"] == "chain" for f in x["stack"]), f"{n}: frames {x['stack'][:3]}")


@case
def names():
    ready, js = scenario("names")
    v, t = ready["victims"], byid_of(js)
    want = {"n-int-huge": "?", "n-int-neg": "?", "n-int-7": "Task-7", "n-bytes": "?",
            "n-garbage": "?", "n-unmapped": "?", "n-len40": "?", "n-kind3": "?", "n-null": "?"}
    for n, name in want.items():
        eq(t[v[n]["id"]]["name"], name, f"{n}: name")
    # a freed object: whatever is there now, but a name of at most 255 bytes
    check(v["n-freed"]["id"] in t, "n-freed: listed")
    # length 2**30 is within bounds: the 4095 characters after a short str,
    # garbage, valid UTF-8 (js_of), cut at 255 bytes
    n30 = t[v["n-len30"]["id"]]["name"]
    check(n30.startswith("name-len-2**30") and len(n30.encode()) > 200,
          f"n-len30: {n30[:40]!r}, {len(n30.encode())} bytes")
    # legitimately set: surrogates and NUL as U+FFFD, controls as they are
    sur = bytes.fromhex(v["n-surrogates"]["name"]).decode("utf-8", "surrogatepass")
    want_sur = "".join("\ufffd" if ch == "\0" or 0xd800 <= ord(ch) <= 0xdfff else ch for ch in sur)
    eq(t[v["n-surrogates"]["id"]]["name"], want_sur, "n-surrogates: name")
    lng = t[v["n-long"]["id"]]["name"]
    eq(lng, "\U0001F600" * 63, "n-long: cut at a character's start within 255 bytes")
    for n in v:
        check(v[n]["id"] in t, f"{n}: listed")
        eq((t[v[n]["id"]]["state"], t[v[n]["id"]]["reason"]), ("waiting", "future"),
           f"{n}: state")


@case
def fields():
    ready, js = scenario("fields")
    v, t = ready["victims"], byid_of(js)
    me = lambda n: v[n]["id"]
    # task_coro at the task itself: it awaits a Task, itself; a cycle of one
    x = t[me("f-coro-self")]
    eq((x["reason"], x["object"], x["awaits"], x["stack"]), ("task", me("f-coro-self"), "Task", []),
       "f-coro-self")
    check(["f-coro-self"] in js["cycles"], f"f-coro-self: its own cycle: {js['cycles']}")
    x = t[me("f-coro-garbage")]
    eq((x["reason"], x["object"], x["awaits"], x["stack"]),
       ("future", v["f-coro-garbage"]["ptr"], "?", []), "f-coro-garbage")
    x = t[me("f-coro-null")]
    eq((x["reason"], x["object"], x["awaits"], x["stack"]), ("future", v["f-coro-null"]["fut"],
                                                          None, []), "f-coro-null: its waiter")
    check(me("f-coro-freed") in t, "f-coro-freed listed")
    # a finished coroutine gives no chain: the waiter is what it waits on
    x = t[me("f-wait-self")]
    eq((x["reason"], x["object"], x["stack"]), ("task", me("f-wait-self"), []), "f-wait-self")
    check(["f-wait-self"] in js["cycles"], f"f-wait-self: its own cycle: {js['cycles']}")
    for n in ("f-wait-int", "f-wait-garbage"):
        eq((t[me(n)]["reason"], t[me(n)]["object"], t[me(n)]["stack"]),
           ("future", v[n]["ptr"], []), n)
    # a state that is not a future's: not a task, left out
    for n in ("f-state-7", "f-state-neg"):
        check(me(n) not in t, f"{n}: listed: {t.get(me(n))}")
    if "f-cancels-neg" in v:
        eq(t[me("f-cancels-neg")]["cancels"], 0, "f-cancels-neg: cancels")
        eq(t[me("f-cancels-max")]["cancels"], 2 ** 31 - 1, "f-cancels-max: cancels")
    eq(len(js["tasks"]), len(v) - 2 + 5, "every task but the two with a bad state")


@case
def many():
    p, ready = start("many", "--many", 200000, "--seconds", 8)
    try:
        n = ready["victims"]["many"]["n"]
        note(f"many: {n} tasks made in {ready['victims']['many']['seconds']} s")
        check(n > MAX_TASKS, f"many: only {n} tasks")
        rss = RSS_MB * (3 if sanitized() else 1)
        for args in (("--json",), (), ("--tree",)):
            r = ps(p.pid, *args)
            eq(r.rc, 0, f"{r.what}: exit status")
            check(re.search(rf"note: more than {MAX_TASKS} tasks", r.err),
                  f"{r.what}: no truncation note: {r.err!r}")
            check(r.rss_mb < rss, f"{r.what}: peak RSS {r.rss_mb:.0f} MB > {rss} MB")
            note(f"many: ps {' '.join(args)}: {r.secs:.2f} s, {r.rss_mb:.0f} MB")
            if args == ("--json",):
                js = js_of(r)
                eq(js["truncated"], True, "many: truncated")
                check(MAX_TASKS // 2 < len(js["tasks"]) <= MAX_TASKS,
                      f"many: {len(js['tasks'])} tasks listed")
                fut = ready["victims"]["many"]["fut"]
                parked = [t for t in js["tasks"] if t["object"] == fut]
                check(len(parked) > MAX_TASKS // 2, f"many: {len(parked)} parked on the future")
                eq({(t["reason"], t["chain_cut"], len(t["stack"])) for t in parked},
                   {("future", False, 1)}, "many: the parked tasks")
        names = record(p, ready, "many", healthy=False, rss=rss)
        check(names is None or MAX_TASKS // 2 < len(names) <= MAX_TASKS + 5,
              f"many: record: {names and len(names)} tasks")
        check(p.poll() is None, "many: the target died")
    finally:
        stop(p)


@case
def shared():
    """65000 tasks all leading into one chain of 1000 coroutines, or into a
    FutureIter that is its own future: each costs the census its share of
    PYT_CENSUS_STEPS, not a walk of LS_PYT_WALK (before: 16 minutes)."""
    ready, js = scenario("shared", "--many", 65000, "--seconds", 20)
    v, t = ready["victims"], byid_of(js)
    eq(js["truncated"], False, "shared: truncated")
    fut = v["many"]["fut"]
    vic = [x for x in js["tasks"] if x["object"] == fut and x["id"] != v["shared"]["owner"]]
    eq(len(vic), v["shared"]["n"], "shared: the victims listed")
    for x in vic:
        check(x["chain_cut"] and x["reason"] == "future" and 8 <= len(x["stack"]) <= MAX_DEPTH
              and all(f["function"] == "chain" for f in x["stack"]) if x["stack"]
              else x["chain_cut"] and x["awaits"] is None,
              f"shared: a victim: {dict(x, stack=x['stack'][:2])}")
    loop = sum(1 for x in vic if not x["stack"])
    check(abs(2 * loop - len(vic)) <= 1, f"shared: {loop} of {len(vic)} in the FutureIter loop")
    owner = t[v["shared"]["owner"]]
    check(owner["chain_cut"] and len(owner["stack"]) >= 8, "shared: the chain's owner: cut at "
          f"its share, {len(owner['stack'])} frames")


@case
def sets():
    if lists_python():
        note("sets: 3.14+ keeps its tasks in lists, not in a WeakSet: see lists and loops")
        return
    for how, err in (("setmask", 0), ("settable", 0), ("setnotset", 1), ("setint", 1),
                     ("setbigdict", 1)):
        # the census cannot read this set, or find it: a clean error
        ready, js = scenario(how, healthy=False, errors=PS_ERRORS[err:err + 1])
        eq(js, None, f"{how}: ps --json succeeded")
    # the current-task dict's keys claim 2**40 entries: no task is running,
    # the rest as it is
    scenario("curdict")
    # a mask of 2**40-1 is a power of two less one: PYT_SET_MAX slots read
    # from the real table on (the healthy tasks among them), or a clean
    # error when that runs into unmapped memory
    ready, js = scenario("setmask40", healthy=False, errors=PS_ERRORS[:1])
    if js is not None:
        eq(js["truncated"], True, "setmask40: truncated")
        check_healthy(js, ready, "setmask40")


@case
def entries():
    if lists_python():
        note("entries: 3.14+ keeps its tasks in lists: see lists (an int and a Future in one)")
        return
    ready, js = scenario("entries")
    eq(sorted(t["name"] for t in js["tasks"]), sorted(HEALTHY), "entries: only the tasks")
    eq((js["truncated"], js["read_error"]), (False, False), "entries: flags")


@case
def forged():
    for seed in SEEDS:
        ready, js = scenario("forged", "--seed", seed)
        forged = set(ready["victims"]["forged"]["addrs"])
        listed = [t for t in js["tasks"] if t["id"] in forged]
        note(f"forged seed {seed}: {len(listed)} of {len(forged)} forged tasks listed, "
             f"{sum(len(t['stack']) for t in listed)} frames"
             + (", truncated" if js["truncated"] else ""))
        check(listed, f"forged seed {seed}: no forged task listed")
        # 3.14+: the real task they are linked after, listed as it is
        anchor = ready["victims"]["forged"].get("anchor")
        if anchor:
            x = byid_of(js).get(anchor)
            check(x and (x["name"], x["state"], x["reason"])
                  == ("forged-anchor", "waiting", "future"), f"forged seed {seed}: the anchor {x}")
        eq(len(js["tasks"]), len(listed) + len(HEALTHY) + bool(anchor),
           f"forged seed {seed}: task count")


@case
def stack():
    ready, js = scenario("stack")
    v, t = ready["victims"], byid_of(js)
    for n in ("st-huge", "st-neg"):
        # a stack count out of bounds: the chain stops at that frame, the
        # task's future (its waiter) is what it waits on
        x = t[v[n]["id"]]
        eq((x["state"], x["reason"], x["object"], x["chain_cut"], [f["function"] for f in x["stack"]]),
           ("waiting", "future", v[n]["fut"], False, ["chain"]), n)
    x = t[v["st-edge"]["id"]]
    eq((x["state"], x["stack"][:1] and x["stack"][0]["function"]), ("waiting", "chain"), "st-edge")
    lines = {}
    with open(TARGET) as f:
        for i, l in enumerate(f, 1):
            m = re.search(r"#\s*(AT-[A-Z-]+)\s*$", l)
            if m:
                lines[m.group(1)] = i
    at = lambda mark: {"function": "chain", "file": TARGET, "line": lines[mark]}
    # 1000 coroutines: the innermost 64 kept (the last one at the await of
    # the future), the chain marked cut
    x = t[v["deep-1000"]["id"]]
    eq((x["chain_cut"], len(x["stack"]), x["awaits"], x["reason"], x["object"]),
       (True, MAX_DEPTH, "Future", "future", v["deep-1000"]["fut"]), "deep-1000")
    eq(x["stack"], [at("AT-CHAIN")] * (MAX_DEPTH - 1) + [at("AT-CHAIN-END")], "deep-1000: frames")
    # 5000: beyond the LS_PYT_WALK coroutines a chain is followed, cut there
    # (the frames kept are the innermost of those walked; the future is
    # still what it waits on, through its waiter)
    x = t[v["deep-5000"]["id"]]
    eq((x["chain_cut"], len(x["stack"]), x["reason"], x["object"]),
       (True, MAX_DEPTH, "future", v["deep-5000"]["fut"]), "deep-5000")
    eq(x["stack"], [at("AT-CHAIN")] * MAX_DEPTH, "deep-5000: frames")
    check("... (await chain cut)" in js["tree"], "--tree: the cut mark")
    if not lists_python():
        return
    # 3.14+: the stackpointer NULL or unaligned: as out of bounds
    for n in ("st-null", "st-odd"):
        x = t[v[n]["id"]]
        eq((x["state"], x["reason"], x["object"], x["chain_cut"], [f["function"] for f in x["stack"]]),
           ("waiting", "future", v[n]["fut"], False, ["chain"]), n)
    # yf_depth slots high: the awaited object is the slot at the bottom,
    # the first local (n, the int 3): the chain ends there
    x = t[v["st-low"]["id"]]
    eq((x["state"], x["reason"], x["object"], x["awaits"], x["chain_cut"],
        [f["function"] for f in x["stack"]]),
       ("waiting", "future", v["st-low"]["obj"], "int", False, ["chain"]), "st-low")
    # a tag bit on the awaited object's stackref (masked), garbage in the
    # slot of the value sent (3.15, not read): the chain whole
    for n in ("st-tag", "st-sent"):
        if n in v:
            x = t[v[n]["id"]]
            eq((x["state"], x["reason"], x["object"], x["awaits"], x["chain_cut"], x["stack"]),
               ("waiting", "future", v[n]["fut"], "Future", False,
                [at("AT-CHAIN")] * 2 + [at("AT-CHAIN-END")]), n)


def parked(x, n, v, what):
    """Task x (JSON) is victim n as the target made it: its name, waiting
    on its future (fut_body)."""
    eq((x["name"], x["state"], x["reason"], x["object"], x["chain_cut"],
        [f["function"] for f in x["stack"]]),
       (n, "waiting", "future", v["fut"], False, ["fut_body"]), f"{what}: {n}")


@case
def lists():
    """3.14+: one corruption of each list that ends it (the rest of that
    list out of reach, the other lists read), the running task of the
    thread states."""
    if not lists_python():
        note("lists: CPython before 3.14 has no task lists")
        return
    ready, js = scenario("lists")
    v, t = dict(ready["victims"]), byid_of(js)
    spec = v.pop("lists")
    # the NULL, unmapped, garbage next and the garbage head: read errors
    eq((js["truncated"], js["read_error"]), (False, True), "lists: flags")
    for n, x in v.items():
        if n in spec["hidden"]:
            # the head of their list is garbage; the running task of their
            # thread state one of them: a pointer, not a list
            check(x["id"] not in t, f"lists: {n} listed: {t.get(x['id'])}")
        elif n in spec["running"]:
            # its thread state's running task, made so
            y = t.get(x["id"])
            check(y, f"lists: {n} not listed")
            eq((y["name"], y["state"]), (n, "running"), f"lists: {n}")
        else:
            # before the corruption of its list (o-1, o-2, tn-ok...), the
            # one that links to it (tn-bad...), or after an int's or a
            # Future's +152 (l-skip-2, l-skip-3)
            check(x["id"] in t, f"lists: {n} not listed")
            parked(t[x["id"]], n, x, "lists")
    eq(len(js["tasks"]), len(HEALTHY) + len(v) - len(spec["hidden"]), "lists: the tasks listed")
    eq(sorted(y["name"] for y in js["tasks"] if y["state"] == "running"), spec["running"],
       "lists: running")


@case
def loops():
    """3.14+: a list that does not come back to its head (itself, an
    earlier task, another thread's list; the interpreter's list): the
    census sees the loop (Brent's check) and ends that list there, with a
    read error, each task listed once; the other lists are read whole (the
    healthy tasks listed as they are)."""
    if not lists_python():
        note("loops: CPython before 3.14 has no task lists")
        return
    for how in ("lself", "lback", "lcross", "linterp"):
        ready, js = scenario(how)
        v, t = ready["victims"], byid_of(js)
        eq((js["truncated"], js["read_error"]), (False, True), f"{how}: truncated, read error")
        for n, x in v.items():
            check(x["id"] in t, f"{how}: {n} not listed")
            parked(t[x["id"]], n, x, how)
        ids = {**ready["healthy"], "main": ready["main"]}
        shown = [n for n, i in ids.items() if i in t]
        eq(sorted(shown), sorted(ids), f"{how}: the healthy tasks listed")
        eq(len(js["tasks"]), len(v) + len(shown), f"{how}: the tasks listed")
        note(f"{how}: {len(js['tasks'])} tasks, census {js['census_ns'] / 1e6:.1f} ms")


@case
def flip():
    """3.14+: a list changing under the census: f-1's next flipped every
    0.2 ms (NULL, garbage, unmapped, itself, skipping f-2), another thread
    making and ending tasks without pause; ps and record (whose censuses
    read again the tasks of the one before that left the lists) keep the
    healthy tasks."""
    if not lists_python():
        note("flip: CPython before 3.14 has no task lists")
        return
    p, ready = start("lflip", "--seed", SEEDS[0])
    try:
        v = ready["victims"]
        flags = {}
        for i in range(6):
            r = ps(p.pid, "--json")
            eq(r.rc, 0, f"{r.what}: exit status")
            js = js_of(r)
            check_healthy(js, ready, f"flip {i}")
            t = byid_of(js)
            check(v["f-1"]["id"] in t, f"flip {i}: f-1 not listed")
            parked(t[v["f-1"]["id"]], "f-1", v["f-1"], f"flip {i}")
            k = (js["truncated"], js["read_error"])
            flags[k] = flags.get(k, 0) + 1
        for args in ((), ("--tree",)):
            eq(ps(p.pid, *args).rc, 0, f"flip: ps {' '.join(args)}")
        note(f"flip: (truncated, read_error) {flags}")
        record(p, ready, "flip")
        check(p.poll() is None, "flip: the target died")
    finally:
        stop(p)


@case
def dbg():
    """3.14+: _asyncio's debug offsets (the .AsyncioDebug section the census
    takes the Task's and the thread state's offsets from) rewritten by the
    target: the list node at 0 (every node read as a task: none is one),
    a task size of 2**40 (refused: a clean error), random offsets within
    the bounds the census checks (seed 5: names and chains from the wrong
    fields)."""
    if not lists_python():
        note("dbg: CPython before 3.14 has no .AsyncioDebug")
        return
    ready, js = scenario("dbg", "--seed", 0, healthy=False)
    eq((js["tasks"], js["truncated"], js["read_error"]), ([], False, False), "dbg 0: node at 0")
    ready, js = scenario("dbg", "--seed", 1, healthy=False, errors=PS_ERRORS[0:1])
    eq(js, None, "dbg 1: a task of 2**40 bytes: ps --json succeeded")
    ready, js = scenario("dbg", "--seed", 5, healthy=False, errors=PS_ERRORS)
    note(f"dbg 5: words {ready['victims']['dbg']['words']}: "
         + (f"{len(js['tasks'])} tasks" if js else "an error"))


@case
def exit_():
    """SIGKILL at random moments of a census: of ps (table, --json, --tree)
    and of record."""
    seed = int(os.environ.get("LSTEST_SEED", "0")) or random.randrange(1, 1 << 30)
    rng = random.Random(seed)
    note(f"exit: seed {seed} (LSTEST_SEED={seed} repeats it)")
    # how long a whole `ps --json` takes on this target: the kills fall in it
    p, ready = start("exit", "--many", 20000, "--seconds", 8)
    try:
        r = ps(p.pid, "--json")
        eq(r.rc, 0, "exit: ps --json on the live target")
        span = r.secs
    finally:
        stop(p)
    note(f"exit: {ready['victims']['many']['n']} tasks, 8 coroutines deep: ps --json in {span:.2f} s")
    outcomes = {}
    for i in range(12):
        p, ready = start("exit", "--many", 20000, "--seconds", 8)
        args = [("--json",), (), ("--tree",)][i % 3]
        at = rng.uniform(0, span)
        r = run([A.loopscope, "ps", *args, str(p.pid)], kill_at=at, victim=p)
        p.wait()
        lines = r.err.splitlines()
        if r.rc == 0:
            for l in lines:
                check(any(re.fullmatch(n, l) for n in PS_NOTES), f"{r.what}: stderr line {l!r}")
            if args == ("--json",):
                js_of(r)
            key = "whole"
        else:
            eq(r.rc, 1, f"{r.what} killed at {at:.3f} s: exit status ({r.err!r})")
            check(len(lines) == 1 and any(re.fullmatch(e, lines[0]) for e in PS_ERRORS),
                  f"{r.what} killed at {at:.3f} s: {r.err!r}")
            eq(r.out, "", f"{r.what}: stdout on an error")
            key = re.sub(r"\d+", "N", lines[0])
        outcomes[key] = outcomes.get(key, 0) + 1
    note(f"exit: ps outcomes {outcomes}")
    if os.geteuid() != 0:
        note("exit: not root: record skipped")
        return
    for i in range(3):
        p, ready = start("exit", "--many", 20000, "--seconds", 8)
        at = rng.uniform(0.2, 3.0)
        db = os.path.join(tmpdir(), "trace.db")
        r = run([A.loopscope, "record", "-q", "-p", str(p.pid), "-d", "5", "-o", db],
                bound=2 * BOUND, kill_at=at, victim=p)
        p.wait()
        eq(r.rc, 0, f"record, target killed at {at:.2f} s: exit status ({r.err[-2000:]!r})")
        integrity(db)
        note(f"exit: record, target killed at {at:.2f} s: 0 in {r.secs:.2f} s")


ORDER = ["cycles", "names", "fields", "stack", "entries", "forged", "sets", "lists", "loops",
         "flip", "dbg", "many", "shared", "exit"]


@case
def all_():
    for name in ORDER:
        t = time.monotonic()
        CASES[name]()
        note(f"-- {name} ok ({time.monotonic() - t:.1f} s)")


def main():
    global A
    A = parse_args(CASES, ("loopscope", "python"))
    if A.case != "--list":
        if not A.loopscope or not A.python:
            print("give --loopscope and --python")
            return 2
        if not os.access(A.python, os.X_OK):
            if os.environ.get("CI") == "true":
                print(f"{A.python} is not installed (CI=true: no skipping)")
                return 1
            print(f"skip: {A.python} is not installed")
            return 77
    return run_case(CASES, A, cleanup, root_why=None)   # record is skipped without root


if __name__ == "__main__":
    sys.exit(main())
