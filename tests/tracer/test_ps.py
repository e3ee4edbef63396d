#!/usr/bin/env python3
"""`loopscope ps` (tracer/cmd_ps.c) against a live asyncio program.

    test_ps.py tasks --python PY --loopscope LOOPSCOPE
        Runs tests/tracer/generic/ps_target.py under the CPython PY (tasks
        parked in known places: a lock deadlock pair, a task awaiting a
        task, a queue getter, a gather fan-out, sleepers, an event, an
        executor, a bare future, an await cycle, an await chain deeper than
        a census reads, a failed task, a hostile name) and, once it printed
        "ready", checks `loopscope ps PID`, `ps --tree PID` and `ps --json
        PID`: every task with its state and reason, what it waits on, the
        locks it holds, its async stack with the target's function names
        and the line numbers of the marker comments (# AT-...), the await
        tree (the awaiting task under the awaited one), the deadlock and
        the await cycle as cycles, the escaping of the hostile name.
    test_ps.py errors --loopscope LOOPSCOPE [--python PY ...]
        The error lines and exit statuses: a process that is not Python
        (sleep), a pid that does not exist, each PY that never imported
        asyncio, an unsupported CPython (3.6-3.9 from pyenv, if installed),
        another user's process read without root (setpriv), malformed
        arguments, --help.

Needs ptrace rights over a child only (no root, no BPF); the permission
check runs only as root.  Nothing here waits on a clock for correctness:
the target says "ready" once its tasks are parked (checked on asyncio's
objects), the timeouts only catch a hang.  Exit 0 = pass, 1 = fail, 77 =
skip (PY not installed; under CI=true that fails instead).
"""
import glob
import json
import os
import re
import selectors
import shutil
import subprocess
import sys
import time

from lstest import Fail, Skip, check, eq, tmpdir, wait_for, parse_args, run_case  # shared: lstest.py

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = os.path.join(HERE, "generic", "ps_target.py")
EVIL = 'evil\x1b[31m\n"\\\t\u202eX'
EVIL_TERM = 'evil\\x1b[31m\\n"\\\\t\\u202eX'      # as ps_term escapes it
STATE_RANK = {"ready": 1, "running": 2, "waiting": 3, "finished": 4, "failed": 5,
              "cancelled": 6}
PROCS = []


def case(fn):
    CASES[fn.__name__] = fn
    return fn


CASES = {}


def markers():
    """{"AT-NAME": line} of the marker comments in the target."""
    out = {}
    with open(TARGET) as f:
        for n, line in enumerate(f, 1):
            m = re.search(r"#\s*(AT-[A-Z-]+)\s*$", line)
            if m:
                out[m.group(1)] = n
    return out


def start(argv, what):
    """Start argv; wait (at most 60 s: a hang, not a measure) for its
    "ready" line.  Returns the Popen."""
    d = tmpdir()
    err = open(os.path.join(d, "stderr"), "w+")
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
    PROCS.append(p)
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    end = time.monotonic() + 60
    line = ""
    while time.monotonic() < end:
        if sel.select(timeout=1):
            line = p.stdout.readline()
            break
    sel.close()
    if line.strip() != "ready":
        err.seek(0)
        raise Fail(f"{what} did not get ready: stdout {line!r}, exit {p.poll()}, "
                   f"stderr {err.read()[-2000:]!r}")
    return p


def cleanup():
    while PROCS:
        p = PROCS.pop()
        if p.poll() is None:
            p.kill()
        p.wait()


def ps(*args, timeout=60):
    """`loopscope ps ARGS`: (exit status, stdout, stderr); stdout checked
    for the bytes a terminal would act on."""
    r = subprocess.run([A.loopscope, "ps", *map(str, args)], capture_output=True,
                       timeout=timeout)
    out = r.stdout.decode("utf-8")       # valid UTF-8, or this raises
    err = r.stderr.decode("utf-8")
    return r.returncode, out, err


def no_raw_controls(text, what):
    """Text output: no ESC, no C0 control but newline, no bidi override."""
    for ch in text:
        if (ord(ch) < 0x20 and ch != "\n") or ord(ch) == 0x7f or 0x80 <= ord(ch) < 0xa0 \
                or 0x202a <= ord(ch) <= 0x202e or 0x2066 <= ord(ch) <= 0x2069:
            raise Fail(f"{what}: raw control character U+{ord(ch):04X} in the output")


def python_version(py):
    return subprocess.run([py, "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True, check=True).stdout.strip()


def interpreter(py):
    if os.access(py, os.X_OK):
        return py
    if os.environ.get("CI") == "true":
        raise Fail(f"{py} is not installed (CMake found it; CI=true: no skipping)")
    raise Skip(f"{py} is not installed")


# ---------------------------------------------------------------- tasks

# name -> (state, reason, function of the innermost app frame, marker)
EXPECT = {
    "dl-a": ("waiting", "lock", "deadlocker", "AT-DL-WAIT"),
    "dl-b": ("waiting", "lock", "deadlocker", "AT-DL-WAIT"),
    "awaited": ("waiting", "sleep", "awaited_body", "AT-AWAITED"),
    "awaiter": ("waiting", "task", "awaiter_body", "AT-AWAITER"),
    "q-get": ("waiting", "queue_get", "getter", "AT-QGET"),
    "fan": ("waiting", "gather", "fan_out", "AT-GATHER"),
    "fan-0": ("waiting", "sleep", "fan_leaf", "AT-FAN-LEAF"),
    "fan-1": ("waiting", "sleep", "fan_leaf", "AT-FAN-LEAF"),
    "fan-2": ("waiting", "sleep", "fan_leaf", "AT-FAN-LEAF"),
    "sleeper": ("waiting", "sleep", "sleeper", "AT-SLEEP"),
    "ev-wait": ("waiting", "event", "ev_waiter", "AT-EVENT"),
    "exec": ("waiting", "executor", "executor_user", "AT-EXEC"),
    "plain-fut": ("waiting", "future", "fut_waiter", "AT-FUTURE"),
    "main": ("waiting", "future", "main", "AT-MAIN"),
    "ac-1": ("waiting", "task", "await_box", "AT-CYCLE"),
    "ac-2": ("waiting", "task", "await_box", "AT-CYCLE"),
    "deep": ("waiting", "event", "deep", "AT-DEEP-END"),   # its outer frames are cut
    "failer": ("failed", None, None, None),
    EVIL: ("waiting", "event", None, None),           # awaits ev.wait() itself: no app frame
}


def check_table(out, pid, version, lines, js):
    rows = out.splitlines()
    m = re.fullmatch(r"pid (\d+)  CPython (\S+)  (\d+) tasks  \(census in [0-9.]+ ms\)", rows[0])
    check(m, f"table header: {rows[0]!r}")
    eq(int(m.group(1)), pid, "header pid")
    eq(m.group(2), version, "header version")
    eq(int(m.group(3)), len(EXPECT), "header task count")
    eq(re.split(r"  +", rows[1].strip()), ["ID", "NAME", "STATE", "WAITS ON", "HOLDS", "AT"],
       "table columns")
    table = {}
    order = []
    for r in rows[2:2 + len(EXPECT)]:
        c = re.split(r"  +", r.rstrip())
        check(len(c) == 6, f"table row with 6 cells: {r!r}")
        table[c[1]] = dict(zip(("id", "name", "state", "waits", "holds", "at"), c))
        order.append(c[1])
    tname = lambda n: EVIL_TERM if n == EVIL else n
    eq(sorted(table), sorted(tname(n) for n in EXPECT), "the tasks in the table")
    # sorted by state then name, as in --json (whose order is the same)
    eq(order, [tname(t["name"]) for t in js["tasks"]], "table order = JSON order")
    want = sorted(EXPECT, key=lambda n: (STATE_RANK[EXPECT[n][0]], n.encode()))
    eq(order, [tname(n) for n in want], "table order (state, then name)")
    byname = {t["name"]: t for t in js["tasks"]}
    for n, (state, reason, func, mark) in EXPECT.items():
        row = table[tname(n)]
        eq(row["id"], byname[n]["id"], f"{n}: ID")
        eq(row["state"], state + ("*" if state == "failed" else ""), f"{n}: STATE")
        if reason:
            check(row["waits"].split(" ")[0] == reason, f"{n}: WAITS ON {row['waits']!r}, "
                  f"expected {reason}")
        if func:
            eq(row["at"], f"{func} {TARGET}:{lines[mark]}", f"{n}: AT")
        else:
            eq(row["at"], "-", f"{n}: AT")
    # what they wait on, by name or address
    eq(table["awaiter"]["waits"], "task awaited", "awaiter: WAITS ON")
    eq(table["ac-1"]["waits"], "task ac-2", "ac-1: WAITS ON")
    eq(table["ac-2"]["waits"], "task ac-1", "ac-2: WAITS ON")
    a, b = table["dl-a"], table["dl-b"]
    check(re.fullmatch(r"0x[0-9a-f]+", a["holds"]) and re.fullmatch(r"0x[0-9a-f]+", b["holds"]),
          f"dl-a, dl-b hold one lock each: {a['holds']!r} {b['holds']!r}")
    eq(a["waits"], "lock " + b["holds"], "dl-a waits for the lock dl-b holds")
    eq(b["waits"], "lock " + a["holds"], "dl-b waits for the lock dl-a holds")
    check(re.fullmatch(r"queue_get 0x[0-9a-f]+", table["q-get"]["waits"]),
          f"q-get: {table['q-get']['waits']!r}")
    eq(table[EVIL_TERM]["waits"], table["ev-wait"]["waits"], "the two event waiters' event")
    for n in EXPECT:
        if n not in ("dl-a", "dl-b"):
            eq(table[tname(n)]["holds"], "-", f"{n}: HOLDS")
    rest = rows[2 + len(EXPECT):]
    check(any(re.fullmatch(r"cycle: (dl-a -> dl-b -> dl-a|dl-b -> dl-a -> dl-b) \(lock 0x[0-9a-f]+ "
                           r"held by dl-[ab]; lock 0x[0-9a-f]+ held by dl-[ab]\)", l) for l in rest),
          f"the deadlock cycle after the table: {rest!r}")


def parse_tree(out):
    """[[depth, name, id, rest, [stack lines]]] of --tree's tasks.  A line
    is a margin of 3-character groups ("|  " or "   "), then "|- " or "`- "
    and a task (at depth groups + 1), or a task at depth 0 when there is no
    margin, or else a line of the stack of the task above."""
    nodes = []
    for l in out.splitlines()[1:]:
        if not l:
            break                        # the cycles follow
        more = re.match(r"\(\+(\d+)\) ", l)
        base = int(more.group(1)) if more else 0
        i = more.end() if more else 0
        groups = 0
        while l[i:i + 3] in ("|  ", "   "):
            i, groups = i + 3, groups + 1
        branch = l[i:i + 3] in ("|- ", "`- ")
        if branch or not groups:
            m = re.fullmatch(r"(\S.*?)  \((0x[0-9a-f]+)\)  (.*)", l[i + 3 if branch else i:])
            check(m, f"--tree: a task line: {l!r}")
            nodes.append([base + groups + branch, m.group(1), m.group(2), m.group(3), []])
        else:
            check(nodes, f"--tree: a stack line before any task: {l!r}")
            nodes[-1][4].append(l[i:])
    return nodes


def check_tree(out, version, lines, js):
    no_raw_controls(out, "--tree")
    rows = out.splitlines()
    check(re.fullmatch(r"pid \d+  CPython \S+  \d+ tasks  \(census in [0-9.]+ ms\)", rows[0]),
          f"tree header {rows[0]!r}")
    nodes = parse_tree(out)
    byname = {t["name"]: t for t in js["tasks"]}
    tname = lambda n: EVIL_TERM if n == EVIL else n
    first = {}
    for i, (depth, name, tid, rest, stack) in enumerate(nodes):
        if "(await cycle: shown above)" in rest:
            continue
        check(name not in first, f"--tree: {name} shown twice")
        first[name] = i
    eq(sorted(first), sorted(tname(n) for n in EXPECT), "--tree: every task once")

    def parent(i):
        d = nodes[i][0]
        for k in range(i - 1, -1, -1):
            if nodes[k][0] == d - 1:
                return nodes[k][1]
        return None

    # the awaiting task under the awaited one
    eq(nodes[first["awaiter"]][0], nodes[first["awaited"]][0] + 1, "--tree: awaiter's depth")
    eq(parent(first["awaiter"]), "awaited", "--tree: awaiter's parent")
    # the await cycle: one under the other, then the first again, not followed
    c1, c2 = first["ac-1"], first["ac-2"]
    top, low = (c1, c2) if c1 < c2 else (c2, c1)
    eq(parent(low), nodes[top][1], "--tree: the await cycle's second task under its first")
    check(any(n[1] == nodes[top][1] and "(await cycle: shown above)" in n[3] for n in nodes),
          "--tree: the await cycle's first task shown again, marked")
    for n, (state, reason, func, mark) in EXPECT.items():
        depth, name, tid, rest, stack = nodes[first[tname(n)]]
        eq(tid, byname[n]["id"], f"--tree {n}: id")
        check(rest.startswith(state), f"--tree {n}: {rest!r} should start with {state}")
        if reason:
            check(rest.startswith(f"{state} on {reason}"), f"--tree {n}: {rest!r}: reason {reason}")
        # the async stack, innermost first, the target's frames at their lines
        want = [f"{f['function']}  {f['file']}:{f['line']}" for f in reversed(byname[n]["stack"])]
        if n == "deep":
            eq(stack[-1], "... (await chain cut)", "--tree deep: cut mark last")
            eq(stack[:-1], [want[0], want[1], want[2], f"[the same frame {len(want) - 3} more times]"],
               "--tree deep: Event.wait, the innermost deep(), the recursion once")
            continue
        eq(stack, want, f"--tree {n}: stack")
        if func:
            check(f"{func}  {TARGET}:{lines[mark]}" in stack,
                  f"--tree {n}: {func} at line {lines[mark]} in {stack!r}")
    # main is called from run: innermost first
    st = nodes[first["main"]][4]
    eq(st[:2], [f"main  {TARGET}:{lines['AT-MAIN']}", f"run  {TARGET}:{lines['AT-RUN']}"],
       "--tree main: main then run")
    # the lock waits end in asyncio's Lock.acquire
    for n in ("dl-a", "dl-b"):
        st = nodes[first[n]][4]
        check(re.fullmatch(r"(Lock\.)?acquire  \S+/asyncio/locks\.py:\d+", st[0]),
              f"--tree {n}: innermost frame {st[0]!r}")
        eq(st[-1], f"deadlocker  {TARGET}:{lines['AT-DL-WAIT']}", f"--tree {n}: outermost")
    cycles = [l for l in rows if l.startswith("cycle: ")]
    check(any(re.fullmatch(r"cycle: (dl-a -> dl-b -> dl-a|dl-b -> dl-a -> dl-b) \(lock (0x[0-9a-f]+) "
                           r"held by dl-[ab]; lock (0x[0-9a-f]+) held by dl-[ab]\)", l)
              for l in cycles), f"--tree: the deadlock cycle in {cycles!r}")
    check(any(re.fullmatch(r"cycle: (ac-1 -> ac-2 -> ac-1|ac-2 -> ac-1 -> ac-2) "
                           r"\(awaits task ac-[12]; awaits task ac-[12]\)", l) for l in cycles),
          f"--tree: the await cycle in {cycles!r}")
    eq(len(cycles), 2, "--tree: two cycles")


def check_json(js, pid, version, lines):
    eq(js["pid"], pid, "json pid")
    eq(js["python"], version, "json python")
    names = [t["name"] for t in js["tasks"]]
    eq(sorted(names), sorted(EXPECT), "json task names (the hostile one byte for byte)")
    t = {x["name"]: x for x in js["tasks"]}
    for n, (state, reason, func, mark) in EXPECT.items():
        x = t[n]
        check(re.fullmatch(r"0x[0-9a-f]+", x["id"]), f"json {n}: id {x['id']!r}")
        eq(x["state"], state, f"json {n}: state")
        if reason:
            eq(x["reason"], reason, f"json {n}: reason")
        if state != "waiting":
            eq(x["reason"], None, f"json {n}: reason")
        if func:
            app = [f for f in x["stack"] if "/lib/python3" not in f["file"]]
            eq(app[-1], {"function": func, "file": TARGET, "line": lines[mark]},
               f"json {n}: innermost app frame")
        for key in ("held", "cancels", "unretrieved", "awaits", "object", "stack"):
            check(key in x, f"json {n}: no {key}")
    eq(t["awaiter"]["object"], t["awaited"]["id"], "json: awaiter's object is awaited")
    eq(t["awaiter"]["awaits"], "Task", "json: awaiter awaits a Task")
    eq(t["ac-1"]["object"], t["ac-2"]["id"], "json: ac-1 awaits ac-2")
    eq(t["ac-2"]["object"], t["ac-1"]["id"], "json: ac-2 awaits ac-1")
    eq(t["dl-a"]["held"], [t["dl-b"]["object"]], "json: dl-a holds what dl-b waits for")
    eq(t["dl-b"]["held"], [t["dl-a"]["object"]], "json: dl-b holds what dl-a waits for")
    for n in EXPECT:
        if n not in ("dl-a", "dl-b"):
            eq(t[n]["held"], [], f"json {n}: held")
    if "failer" in EXPECT:
        eq(t["failer"]["unretrieved"], True, "json failer: unretrieved")
        eq(t["failer"]["stack"], [], "json failer: no stack (done)")
    eq(t["deep"]["chain_cut"], True, "json deep: chain cut")
    eq(len(t["deep"]["stack"]), 64, "json deep: frames kept")
    ds = t["deep"]["stack"]
    check(all(f == {"function": "deep", "file": TARGET, "line": lines["AT-DEEP"]}
              for f in ds[:-2]), "json deep: the outer frames deep() at AT-DEEP")
    eq(ds[-2], {"function": "deep", "file": TARGET, "line": lines["AT-DEEP-END"]},
       "json deep: the innermost deep() at AT-DEEP-END")
    check(ds[-1]["function"].endswith("wait") and ds[-1]["file"].endswith("/asyncio/locks.py"),
          f"json deep: Event.wait innermost: {ds[-1]}")
    eq([f["function"] for f in t["main"]["stack"]], ["run", "main"], "json main: run, main")
    eq(t["main"]["stack"][0]["line"], lines["AT-RUN"], "json main: run's line")
    eq(t["ev-wait"]["object"], t[EVIL]["object"], "json: the two event waiters' event")
    eq(t["fan"]["awaits"], "_GatheringFuture", "json fan: awaits")
    for n in ("dl-a", "dl-b", "ac-1", "awaiter", "sleeper", "exec"):
        eq(t[n]["chain_cut"], False, f"json {n}: chain_cut")
        eq(t[n]["cancels"], 0, f"json {n}: cancels")
    cyc = sorted(sorted(c) for c in js["cycles"])
    eq(cyc, [["ac-1", "ac-2"], ["dl-a", "dl-b"]], "json cycles")
    for c in js["cycles"]:
        check(c in (["ac-1", "ac-2"], ["ac-2", "ac-1"], ["dl-a", "dl-b"], ["dl-b", "dl-a"]),
              f"json cycle {c!r}: a path")


@case
def tasks():
    """Every task, its wait, its stack, the tree and the cycles (above)."""
    global EXPECT
    py = interpreter(A.python)
    version = python_version(py)
    if tuple(map(int, version.split(".")[:2])) >= (3, 14):
        # a done task leaves 3.14's task lists (as it leaves all_tasks()):
        # the census cannot see the failed one
        EXPECT = {n: v for n, v in EXPECT.items() if n != "failer"}
    lines = markers()
    p = start([py, TARGET], f"ps_target.py under {py}")
    rc, jout, err = ps("--json", p.pid)
    eq((rc, err), (0, ""), "ps --json: exit status and stderr")
    try:
        js = json.loads(jout)
    except ValueError as e:
        raise Fail(f"ps --json: not JSON ({e}): {jout[:2000]!r}")
    check_json(js, p.pid, version, lines)
    rc, out, err = ps(p.pid)
    eq((rc, err), (0, ""), "ps: exit status and stderr")
    no_raw_controls(out, "ps")
    check_table(out, p.pid, version, lines, js)
    rc, tout, err = ps("--tree", p.pid)
    eq((rc, err), (0, ""), "ps --tree: exit status and stderr")
    check_tree(tout, version, lines, js)
    # -p PID is the same; the target was only read: still there, unchanged
    rc, out2, err = ps("-p", p.pid, "--json")
    eq(rc, 0, "ps -p PID --json")
    js2 = json.loads(out2)
    eq([(t["id"], t["name"], t["state"], t["reason"]) for t in js2["tasks"]],
       [(t["id"], t["name"], t["state"], t["reason"]) for t in js["tasks"]],
       "a second census: the same tasks")
    check(p.poll() is None, "the target is still running")
    print(tout)
    # tasks of a loop started before 200 other threads (3.14+ keeps a task
    # list per thread state, newest thread first: the main one is last)
    src = os.path.join(tmpdir(), "threads.py")
    with open(src, "w") as f:
        f.write(THREADS)
    p = start([py, src], f"threads.py under {py}")
    rc, out, err = ps("--json", p.pid)
    eq((rc, err), (0, ""), "ps --json beside 200 threads")
    js = json.loads(out)
    eq((sorted(t["name"] for t in js["tasks"]), js["truncated"], js["read_error"]),
       (["Task-1", "mine-0", "mine-1", "mine-2"], False, False), "the tasks beside 200 threads")


THREADS = """
import asyncio, threading
ev = threading.Event()
for _ in range(200):
    threading.Thread(target=ev.wait, daemon=True).start()
async def body(f):
    await f
async def main():
    f = asyncio.get_running_loop().create_future()
    for i in range(3):
        asyncio.create_task(body(f), name=f"mine-{i}")
    await asyncio.sleep(0)
    print("ready", flush=True)
    await f
asyncio.run(main())
"""


# ---------------------------------------------------------------- errors

@case
def libevl():
    """A libevl process (examples/deadlock: two transfers deadlocked on two
    locks), read through evl_debug: its tasks, what each waits on, the
    locks held, each suspended task's native stack unwound from its own
    stack, and the cycle."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "deadlock.c")
    with open(src) as f:
        at = next(i for i, l in enumerate(f, 1) if "evl_lock_acquire(&t->to->lock)" in l)
    p = subprocess.Popen([os.path.join(A.examples, "deadlock"), "--seconds", "120"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    PROCS.append(p)

    def deadlocked():
        rc, out, _ = ps("--json", p.pid)
        if rc:
            return None
        js = json.loads(out)
        t = {x["name"]: x for x in js["tasks"]}
        both = all(t.get(n, {}).get("reason") == "lock" for n in ("transfer_a_to_b", "transfer_b_to_a"))
        return js if both else None

    js = wait_for(deadlocked, 60, "both transfers waiting for a lock (a hang guard)")
    eq(js["libevl"], "1", "json: the evl_debug version")
    t = {x["name"]: x for x in js["tasks"]}
    eq(sorted(t), ["main", "transfer_a_to_b", "transfer_b_to_a"], "json: the tasks")
    a, b = t["transfer_a_to_b"], t["transfer_b_to_a"]
    eq(a["held"], [b["object"]], "transfer_a_to_b holds what transfer_b_to_a waits for")
    eq(b["held"], [a["object"]], "transfer_b_to_a holds what transfer_a_to_b waits for")
    for x in (a, b):
        funcs = [f["function"] for f in x["stack"]]
        check("transfer" in funcs and funcs[-1] == "evl__task_wait",
              f"{x['name']}: its stack, outermost first, down to evl__task_wait: {funcs}")
        tr = next(f for f in x["stack"] if f["function"] == "transfer")
        check(tr["file"].endswith("examples/deadlock.c") and tr["line"] == at,
              f"{x['name']}: transfer() at deadlock.c:{at}: {tr}")
    rc, out, err = ps(p.pid)
    eq((rc, err), (0, ""), "ps PID")
    rows = out.splitlines()
    check(re.fullmatch(rf"pid {p.pid}  libevl  3 tasks  \(census in [0-9.]+ ms\)", rows[0]),
          f"header: {rows[0]!r}")
    check(any(r.split()[1] == "transfer_a_to_b" and r.rstrip().endswith(f"deadlock.c:{at}")
              for r in rows[2:5]), f"table: transfer_a_to_b AT deadlock.c:{at}: {rows!r}")
    rc, out, err = ps("--tree", p.pid)
    eq((rc, err), (0, ""), "ps --tree PID")
    cyc = [l for l in out.splitlines() if l.startswith("cycle: ")]
    eq(len(cyc), 1, f"one cycle: {out!r}")
    check(re.match(r"cycle: (transfer_a_to_b -> transfer_b_to_a -> transfer_a_to_b|"
                   r"transfer_b_to_a -> transfer_a_to_b -> transfer_b_to_a) \(lock 0x", cyc[0]),
          f"the cycle: {cyc[0]!r}")


def one_error(args, rc_want, pattern, what):
    rc, out, err = ps(*args)
    eq(rc, rc_want, f"{what}: exit status (stderr {err!r})")
    eq(out, "", f"{what}: stdout")
    check(err.endswith("\n") and err.count("\n") == 1, f"{what}: one line on stderr: {err!r}")
    check(re.fullmatch(pattern, err.rstrip("\n")), f"{what}: {err!r} !~ {pattern!r}")


@case
def errors():
    """Not Python, no such process, no asyncio, unsupported, permission,
    bad arguments, --help."""
    s = subprocess.Popen(["sleep", "100"])
    PROCS.append(s)
    one_error([s.pid], 1, rf"loopscope ps: pid {s.pid}: not CPython.*", "sleep 100")
    # a pid that is gone: a child that exited and was reaped
    g = subprocess.Popen(["true"])
    g.wait()
    check(not os.path.exists(f"/proc/{g.pid}"), "the reaped child's pid is free")
    one_error([g.pid], 1, rf"loopscope ps: no such process: {g.pid}", "a pid that is gone")
    for py in A.python or []:
        if not os.access(py, os.X_OK):
            check(os.environ.get("CI") != "true", f"{py} is not installed")
            print(f"  {py} not installed: skipped")
            continue
        p = start([py, TARGET, "--no-asyncio"], f"ps_target.py --no-asyncio under {py}")
        one_error([p.pid], 1, rf"loopscope ps: pid {p.pid}: no asyncio in this process "
                  r"\(not imported yet\)", f"{py} without asyncio")
        one_error(["--tree", p.pid], 1, r"loopscope ps: .*no asyncio in this process.*",
                  f"{py} without asyncio, --tree")
    old = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.[6-9].*/bin/python3.[6-9]")))
    if old:
        p = start([old[-1], TARGET], f"ps_target.py under {old[-1]}")
        one_error([p.pid], 1, rf"loopscope ps: pid {p.pid}: CPython 3\.[6-9]: unsupported",
                  f"{old[-1]}")
    else:
        print("  no CPython 3.6-3.9 here: the unsupported-version check skipped")
    # another user's process, not root: setpriv to nobody
    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0 and setpriv:
        r = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
                            A.loopscope, "ps", str(s.pid)], capture_output=True, text=True)
        if r.returncode in (126, 127):
            print(f"  {A.loopscope} is not executable by nobody: the permission check skipped")
        else:
            eq(r.returncode, 1, f"ps as nobody: exit status ({r.stderr!r})")
            eq(r.stdout, "", "ps as nobody: stdout")
            check(re.fullmatch(rf"loopscope ps: cannot read process {s.pid}: permission denied "
                               r"\(not root: .*\)\n", r.stderr), f"ps as nobody: {r.stderr!r}")
    else:
        print("  not root (or no setpriv): the permission check skipped")
    # arguments
    one_error([], 2, r"loopscope ps: missing PID \(see 'loopscope ps --help'\)", "no PID")
    one_error(["abc"], 2, r"loopscope ps: invalid PID 'abc'", "PID abc")
    one_error(["12x"], 2, r"loopscope ps: invalid PID '12x'", "PID 12x")
    one_error(["0"], 2, r"loopscope ps: invalid PID '0'", "PID 0")
    one_error(["-p", "\x1b[2J"], 2, r"loopscope ps: invalid PID '\\x1b\[2J'", "PID ESC[2J")
    one_error(["1", "2"], 2, r"loopscope ps: unexpected argument '2'.*", "two PIDs")
    one_error(["--bogus", "1"], 2, r"loopscope ps: unknown option '--bogus'.*", "--bogus")
    one_error(["-p"], 2, r"loopscope ps: option '-p' needs a value.*", "-p without a value")
    one_error(["--tree", "--json", "1"], 2, r"loopscope ps: --tree and --json cannot be combined.*",
              "--tree --json")
    rc, out, err = ps("--help")
    eq((rc, err), (0, ""), "--help")
    check(out.startswith("usage: loopscope ps"), f"--help: {out[:80]!r}")
    r = subprocess.run([A.loopscope, "help"], capture_output=True, text=True)
    check(re.search(r"^  ps +\S", r.stdout, re.M), "`loopscope help` lists ps")


def main():
    global A
    A = parse_args(CASES, ("loopscope", "examples"),
                   extra=(("--python", {"action": "append"}),))
    if A.case == "tasks":
        check_py = A.python or []
        if len(check_py) != 1:
            print("tasks: give one --python")
            return 2
        A.python = check_py[0]
    return run_case(CASES, A, cleanup, root_why=None)   # ptrace of a child: no root needed


if __name__ == "__main__":
    sys.exit(main())
