#!/usr/bin/env python3
"""hostile_traces.py -- the viewer on adversarial, well-formed trace databases.

    hostile_traces.py --loopscope BIN --fixtures DIR [--only NAME] [--keep DIR]

A trace database is untrusted input: fuzz_reader.py damages the file, this
test keeps the file valid SQLite with the real schema (tracer/schema.sql,
lookup tables copied from a fixture as tracer/store.c fills them) and makes
the *values* hostile:

  names      every trace string (task names, functions, files, modules,
             syscalls, meta values, lookup names) with quotes, NUL, 0xff,
             invalid UTF-8, ANSI escapes, newlines, '%n', XML and DOT
             metacharacters; includes a wait-for cycle
  extremes   timestamps at INT64_MIN/MAX and going backwards, negative
             durations, out-of-range states, kinds, reasons and leak kinds,
             dangling task, loop and stack ids
  span       a trace from 0 to 2^63-1 (the timeline tick formatter)
  random     ~200k random events over many tasks and loops, random
             blocking episodes, stacks and stats
  bogus      ~200k records shaped to defeat per-event lookups (quadratic SQL)
  empty      the schema and nothing else (no meta either)
  generic    the generic loop mode (meta mode = 'generic'): hostile runtime,
             wait_calls and jit_symbols, loop_windows backwards, overlapping,
             zero-length, with negative and absurd counts, windows of loops
             without a row, iteration_hist buckets with hi_ns <= lo_ns,
             negative and INT64_MAX counts and more buckets than any real
             histogram, asyncio tasks with hostile names, Python frames
  deep       stacks of 100 000 frames (the call site past 50 000 system
             frames, one function recursing, none application code) under
             105 episodes: each command within DEEP_BOUND (release, ASan)
             and still right (check_deep: every frame, the sites)
  census     a generic trace with a census lifecycle (meta task_source
             'census ...'): names' tasks and events, their await chains
             (await_stacks: hostile frames, a missing stack), wakes with
             waker kind 0 (unknown), a deadlock through lock holders,
             hostile task_source and censuses, derived on first read
  (extremes and random also hold hostile windows and histograms)

Every viewer command runs on each with a per-command timeout.  Each run
must exit 0, or 1 with one "error: ..." line; no signal, no sanitizer
report; JSON parses strictly (UTF-8, no NaN, no lone surrogates), SVG parses
as XML, .dot files are read back by Graphviz without a complaint, and what
goes to the terminal is valid UTF-8 without ESC or any control character
other than newline.
"""
import argparse
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lstrace  # noqa: E402  (tests/lstrace.py: events needs loopscope's SQLite extension)

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = os.path.join(HERE, "..", "..", "tracer", "schema.sql")
DERIVED = os.path.join(HERE, "..", "..", "model", "derived.sql")
TIMEOUT = 20
# The deep trace's bound per command (issue 36): the viewer reads it in at
# most 4 s on a loaded 2-vCPU VM (release), 6 s under ASan+UBSan (SQLite
# itself is not instrumented); a path quadratic in the stack's depth, or in
# its depth times its episodes, took 60 s to minutes.
DEEP_BOUND = {"release": 15, "asan": 60}
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
LOOKUPS = ["event_kinds", "states", "suspend_reasons", "waker_kinds", "leak_kinds",
           "blocking_kinds", "syscalls"]

# Byte strings a traced program (or a forged file) could put in any text column.
HOSTILE = [
    b'quote"\'`',
    b"nul\x00after",
    b"\xff\xfe bad bytes",
    b"\xc3\x28 invalid 2-byte",
    b"\xe2\x82 truncated 3-byte",
    b"\xed\xa0\x80 surrogate",
    b"\xf4\x90\x80\x80 beyond U+10FFFF",
    b"\xc0\xaf overlong",
    b"\x1b[31mred\x1b[0m\x1b]0;title\x07\x1b[2J",
    b"new\nline\r\nand\ttab",
    b"%n%s%x%p%%",
    b"<tag attr=\"x\">&amp;&#0;</svg>]]>",
    b"back\\slash\\N\\l\\G{}|;\\",
    b"\x01\x02\x7f\xc2\x9b\xc2\x85 C0 C1",
    b"\xef\xbf\xbe\xef\xbf\xbf nonchars \xe2\x80\xae rtl",
    b"",
    b"long-" + b"x" * 3000,
    b"ok-name#7",
]


def text(b, i):
    """A hostile value as SQLite stores it: TEXT with those exact bytes, or a BLOB."""
    return ("cast", b) if i % 3 else ("blob", b)


def model_version():
    for line in open(DERIVED):
        if line.startswith("-- model_version "):
            return line.split()[2]
    raise SystemExit("hostile_traces.py: no model_version in " + DERIVED)


class Db:
    def __init__(self, path, fixtures):
        self.path = path
        lstrace.create_schema(path, open(SCHEMA).read())
        self.con = sqlite3.connect(path)
        self.con.executescript(open(DERIVED).read())
        fx = os.path.join(fixtures, "lifecycle.db")
        self.con.execute("ATTACH ? AS fx", (fx,))
        for t in LOOKUPS:
            self.con.execute(f"INSERT INTO {t} SELECT * FROM fx.{t}")
        self.con.commit()
        self.con.execute("DETACH fx")

    def insert(self, table, rows):
        """rows: tuples whose items may be ('cast'|'blob', bytes) for hostile text
        (events: integers and None only, as Db.events writes them)."""
        if table == "events":
            self.events(rows)
            return
        for r in rows:
            vals, ph = [], []
            for v in r:
                if isinstance(v, tuple):
                    ph.append("CAST(? AS TEXT)" if v[0] == "cast" else "?")
                    vals.append(v[1])
                else:
                    ph.append("?")
                    vals.append(v)
            self.con.execute(f"INSERT INTO {table} VALUES({','.join(ph)})", vals)

    def events(self, rows):
        """Append events, encoded by the extension in chunks of 1024, the
        size these traces always had (the recorder's are of 4096; the viewer
        reads any size)."""
        lstrace.write_events(self.con, rows, per_chunk=1024)

    def meta(self, d):
        self.insert("meta", [(k, v) for k, v in d.items()])

    def finish(self, indexes=True, forged=True):
        # forged: the derived tables are the forged ones written here, taken
        # as they are (model_version current): a hostile trace may say
        # anything.  Otherwise the viewer derives them from the hostile
        # events on first read (model/derive.c), as for a cut-short trace.
        if forged:
            self.con.execute("INSERT OR REPLACE INTO meta VALUES('model_version', ?)",
                             (model_version(),))
        if indexes:              # what the recorder creates when capture ends
            self.con.executescript("CREATE INDEX tasks_loop ON tasks(loop_id);")
        self.con.commit()
        self.con.close()


def build_names(db):
    H = HOSTILE
    db.meta({"tool": text(H[8], 1), "target_cmdline": text(H[8] + b" " + H[1], 1),
             "target_binary": text(H[2], 1), "host": text(H[9], 1), "kernel": text(H[10], 1),
             "start_utc": text(H[11], 1), "stop_reason": text(H[12], 1), "mode": text(H[13], 1),
             "blocking_detection": text(H[3], 1), "syscalls": text(H[14], 1),
             "start_ns": "1000", "end_ns": "900000000", "duration_ns": "899999000",
             "block_threshold_ns": "1000000", "dropped_messages": "0", "dropped_bytes": "0",
             "rejected_records": "0", "read_errors": "0"})
    db.con.execute("UPDATE suspend_reasons SET name = CAST(? AS TEXT) WHERE id = 4", (H[8],))
    db.con.execute("UPDATE waker_kinds SET name = CAST(? AS TEXT) WHERE id = 1", (H[9],))
    db.con.execute("UPDATE leak_kinds SET name = CAST(? AS TEXT) WHERE id = 2", (H[11],))
    db.con.execute("UPDATE syscalls SET name = CAST(? AS TEXT) WHERE nr = 35", (H[12],))
    db.con.execute("UPDATE blocking_kinds SET name = CAST(? AS TEXT) WHERE id = 1", (H[10],))
    db.insert("loops", [(1, 100, 100, 1000, None)])
    tasks, stats, events = [], [], []
    n = len(H)
    for i, name in enumerate(H):
        tid = i + 1
        created = 1000 + tid * 1000
        state = [4, 5, 6, None][i % 4]
        tasks.append((tid, 1, None if i == 0 else 1, text(name, i), text(H[(i + 3) % n], i),
                      4096 + i, created, 0, None if state is None else created + 50_000_000,
                      state, -5 if state == 5 else 0, 2 if i % 5 == 4 else None))
        stats.append((tid, 20_000_000, 1000, 5000, 3, 2, 15_000_000, 1, 12_000_000))
        events += [(created, 1, tid, 3, 0, 1, 4096), (created + 10, 1, tid, 4, None, None, None),
                   (created + 20_000_000, 1, tid, 5, 1 + i % 7, (tid % n) + 1, 1_000_000),
                   (created + 21_000_000, 1, tid, 6, 1 + i % 8, tid, None),
                   (created + 22_000_000, 1, tid, 4, None, None, None)]
        if state is not None:
            events.append((created + 50_000_000, 1, tid, 7, state, -5 if state == 5 else 0, None))
        if i % 5 == 4:
            events.append((created + 60_000_000, 1, tid, 9, 2, None, None))
    # a wait-for cycle among the last three (pending) tasks, all hostile names
    for a, b in ((n - 2, n - 1), (n - 1, n), (n, n - 2)):
        events.append((500_000_000, 1, a, 5, 4, b, None))
    db.insert("tasks", tasks)
    db.insert("task_stats", stats)
    db.insert("events", events)
    db.insert("stacks", [(1, len(H)), (2, 3)])
    db.insert("frames", [(1, d, 4096 + d, text(H[d], d), text(b"/src/" + H[(d + 1) % n], d),
                          d, text(H[(d + 2) % n], d + 1)) for d in range(len(H))])
    db.insert("frames", [(2, d, 8192 + d, text(H[d + 8], 0), None, None, text(H[d], 1))
                         for d in range(3)])
    db.insert("blocking", [(1, 1, 2, 2000, 30_000_000, 1, 35, 1, 2),
                           (2, 1, None, 5000, 20_000_000, 2, None, 2, 1),
                           (3, 1, 9, 9000, 15_000_000, 1, 35, 1, 0)])
    db.insert("blocking_victims", [(1, 3, 2000, 40_000_000, 1_000_000, 1),
                                   (1, 4, 2000, 40_000_000, 2_000_000, 3),
                                   (2, 5, 5000, 30_000_000, 1_000_000, 2)])


def build_extremes(db):
    db.meta({"start_ns": str(I64_MAX), "end_ns": str(I64_MIN), "duration_ns": str(I64_MIN),
             "block_threshold_ns": str(I64_MAX), "target_pid": "-1",
             "dropped_events": str(I64_MAX), "dropped_messages": "-7",
             "dropped_bytes": "99999999999999999999999", "rejected_records": "x",
             "read_errors": str(I64_MIN), "dropped_events_claimed": "1e400"})
    db.insert("loops", [(1, 1, 1, I64_MIN, I64_MAX), (2, 2, 2, I64_MAX, I64_MIN),
                        (I64_MAX, 3, I64_MIN, None, None)])
    weird = [I64_MIN, -1, 0, 1, 7, 8, 63, 64, 99, 255, 256, 999, 1000, 1 << 31, I64_MAX]
    tasks, stats, events = [], [], []
    for i, w in enumerate(weird):
        tid = i + 1
        tasks.append((tid, [1, 2, 99, I64_MAX][i % 4], [None, tid + 1000, -5, tid][i % 4],
                      f"t{i}", None, None, [I64_MIN, I64_MAX, 0, -1][i % 4], i % 2,
                      [I64_MAX, I64_MIN, None, 5][i % 4], w, w, w))
        stats.append((tid, w, -w if w != I64_MIN else 0, w, w, w, w, w, w))
        for k, kind in enumerate([3, 4, 5, 6, 7, 8, 9, w, 5, 6, 4]):
            ts = [I64_MAX, I64_MIN, 0, I64_MAX - k, I64_MIN + k, 10 ** 18 - k * 10 ** 17][
                (i + k) % 6]
            events.append((ts, [1, 2, 99][k % 3], tid if k % 5 else tid + 500, kind, w,
                           [I64_MIN, tid + 1, I64_MAX, -1][k % 4], w))
    events += [(I64_MIN, 1, None, k, I64_MAX, I64_MIN, I64_MAX) for k in range(1, 15)]
    events += [(I64_MAX, 7, None, k, I64_MIN, I64_MAX, -1) for k in (10, 11, 12, 13, 2)]
    db.insert("tasks", tasks)
    db.insert("task_stats", stats)
    db.insert("events", events)
    db.insert("stacks", [(1, I64_MAX), (2, -1)])
    db.insert("frames", [(1, 0, I64_MAX, "f", "/a/b.c", I64_MIN, "/usr/lib/x.so"),
                         (1, 1, -1, None, None, I64_MAX, None),
                         (77, 0, 0, "orphan", "x.c", 1, None)])
    db.insert("blocking", [(1, 1, 1, I64_MIN, I64_MAX, 1, I64_MAX, 1, I64_MAX),
                           (2, 2, 999, I64_MAX, I64_MAX, 2, -1, 55, -3),
                           (3, 99, None, 0, I64_MIN, 7, 35, None, 0),
                           (4, 1, 2, I64_MAX - 5, -10, 1, 0, 2, 1)])
    db.insert("blocking_victims", [(1, 4242, I64_MIN, I64_MAX, I64_MIN, 99),
                                   (2, 1, I64_MAX, I64_MIN, I64_MAX, -1),
                                   (77, 2, 0, 0, 0, 1)])


def build_span(db):
    db.meta({"start_ns": "0", "end_ns": str(I64_MAX), "duration_ns": str(I64_MAX)})
    db.insert("loops", [(1, 1, 1, 0, None)])
    db.insert("tasks", [(1, 1, None, "a", None, None, 0, 0, None, None, None, None),
                        (2, 1, 1, "b", None, None, I64_MAX, 0, 5, 4, 0, None)])
    db.insert("task_stats", [(1, 1, 1, 1, 1, 1, 1, 0, 0), (2, 1, 1, 1, 1, 1, 1, 0, 0)])
    db.insert("events", [(0, 1, 1, 3, 0, 0, 0), (1, 1, 1, 4, None, None, None),
                         (I64_MAX - 1, 1, 1, 5, 1, 0, I64_MAX), (I64_MAX - 2, 1, 2, 3, 0, 1, 0),
                         (I64_MAX - 1, 1, 2, 4, None, None, None), (5, 1, 2, 7, 4, 0, None),
                         (-(1 << 62), 1, 2, 6, 1, 0, None)])
    db.insert("blocking", [(1, 1, 1, 0, I64_MAX, 1, None, None, 0)])


def build_random(db, rng, nevents=200_000, ntasks=3000, nloops=40):
    db.meta({"start_ns": "1000000", "end_ns": str(10 ** 12), "duration_ns": str(10 ** 12),
             "block_threshold_ns": "1000000", "dropped_events": "12", "dropped_messages": "3"})
    db.insert("loops", [(i, 1, 1000 + i, rng.randrange(10 ** 12),
                         rng.choice([None, rng.randrange(10 ** 12)])) for i in range(1, nloops + 1)])

    def ts():
        r = rng.random()
        if r < 0.01:
            return rng.choice([I64_MIN, I64_MAX, 0, -1])
        return rng.randrange(10 ** 12)

    def tid():
        return rng.randrange(-5, ntasks + 50) if rng.random() < 0.05 else rng.randrange(1, ntasks + 1)

    tasks = [(i, rng.randrange(1, nloops + 3), rng.choice([None, tid()]),
              ("cast", rng.choice(HOSTILE[:14]) + str(i).encode()), None, None, ts(),
              rng.randrange(2), rng.choice([None, ts()]), rng.choice([None, 4, 5, 6, 0, 99, -1]),
              rng.choice([0, -5, -125, 7, None]), rng.choice([None, 1, 2, 3, 0, 50]))
             for i in range(1, ntasks + 1)]
    db.insert("tasks", tasks)
    db.insert("task_stats", [(i, rng.randrange(10 ** 10), rng.randrange(10 ** 9),
                              rng.randrange(10 ** 11), rng.randrange(100), rng.randrange(100),
                              rng.randrange(10 ** 9), rng.randrange(5), rng.randrange(10 ** 8))
                             for i in range(1, ntasks + 1)])
    rows = []
    for _ in range(nevents):
        kind = rng.randrange(0, 16) if rng.random() < 0.95 else rng.randrange(-100, 10 ** 6)
        reason = rng.randrange(0, 10) if rng.random() < 0.9 else rng.randrange(-10 ** 6, 10 ** 6)
        task = None if rng.random() < 0.1 else tid()
        arg0 = tid() if rng.random() < 0.6 else rng.randrange(-2 ** 40, 2 ** 40)
        rows.append((ts(), rng.randrange(1, nloops + 3), task, kind, reason, arg0,
                     rng.randrange(-10 ** 9, 10 ** 12)))
    db.events(rows)
    db.con.executemany("INSERT INTO stacks VALUES(?,?)", [(i, 8) for i in range(1, 301)])
    db.con.executemany("INSERT INTO frames VALUES(?,?,?,?,?,?,?)",
                       [(s, d, rng.randrange(2 ** 40), f"fn{rng.randrange(400)}",
                         rng.choice([None, f"/src/f{rng.randrange(30)}.c"]), rng.randrange(900),
                         rng.choice([None, "/usr/lib/libc.so.6", "[vdso]", "/app/bin"]))
                        for s in range(1, 301) for d in range(8)])
    db.con.executemany("INSERT INTO blocking VALUES(?,?,?,?,?,?,?,?,?)",
                       [(i, rng.randrange(1, nloops + 3), rng.choice([None, tid()]), ts(),
                         rng.randrange(-10 ** 6, 10 ** 10), rng.randrange(0, 4),
                         rng.choice([None, 0, 35, 7, 100000]), rng.randrange(0, 320),
                         rng.randrange(-1, 5)) for i in range(1, 3001)])
    db.con.executemany("INSERT OR IGNORE INTO blocking_victims VALUES(?,?,?,?,?,?)",
                       [(rng.randrange(1, 3100), tid(), ts(), ts(), rng.randrange(-10 ** 9, 10 ** 9),
                         rng.randrange(-1, 6)) for _ in range(6000)])


def build_bogus(db, rng):
    """Records shaped to hit per-event correlated lookups: one task that only
    runs, one only woken by timers, one only leaking, and 20k unfinished or
    failed tasks among 40k cancels and awaits."""
    db.meta({"start_ns": "0", "end_ns": str(10 ** 11), "block_threshold_ns": "1000000"})
    db.insert("loops", [(1, 1, 1, 0, None)])
    n = 20_000
    db.con.executemany("INSERT INTO tasks VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                       [(i, 1, None if i < 4 else rng.randrange(1, n), f"t{i}", "fn", 1, 0, 0,
                         None if i % 2 else 10 ** 10, None if i % 2 else 5, -5, None)
                        for i in range(1, n + 4)])
    db.con.executemany("INSERT INTO task_stats VALUES(?,?,?,?,?,?,?,?,?)",
                       [(i, 10 ** 10, 0, 0, 60_000, 0, 10 ** 10, 0, 0) for i in range(1, n + 4)])
    ev = [(k * 1000, 1, 1, 4, None, None, None) for k in range(60_000)]
    ev += [(k * 1000, 1, 2, 6, 1, 0, None) for k in range(60_000)]
    ev += [(k * 1000, 1, 3, 9, 1, None, None) for k in range(20_000)]
    ev += [(rng.randrange(10 ** 11), 1, rng.randrange(4, n + 4), 8, None, rng.randrange(n), None)
           for _ in range(30_000)]
    ev += [(rng.randrange(10 ** 11), 1, rng.randrange(4, n + 4), 5, 4, rng.randrange(n), None)
           for _ in range(30_000)]
    db.events(ev)


DEEP = 100_000


def build_deep(db, depth=DEEP):
    """A blocking episode whose stack is depth frames deep (issue 36): the
    recorder never writes one (it unwinds 64 frames at most), a forged or
    damaged file can.  Stack 1: depth // 2 system frames (libc's) under
    depth // 2 distinct application functions, the innermost, the call
    site, deep_0 at /src/deep.c:1000000 (the site is found past the system
    half); stack 2: one function recursing depth times; stack 3: a short
    ordinary stack; stack 4: depth system frames and no application frame.
    105 episodes on stack 1 (100 of 11 ms, below the others), two on stack
    2, one on stack 3 and on stack 4; tasks 2 and 3 delayed."""
    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    half = depth // 2
    db.meta({"start_ns": "1000", "end_ns": "2000000000", "duration_ns": "1999999000",
             "block_threshold_ns": "10000000", "dropped_messages": "0", "dropped_bytes": "0",
             "rejected_records": "0", "read_errors": "0", "stop_reason": "duration reached",
             "blocking_detection": "on"})
    db.insert("loops", [(1, 100, 100, 1000, None)])
    tasks, stats, events = [], [], []
    for tid in (1, 2, 3):
        created = 1000 + tid * 1000
        tasks.append((tid, 1, None if tid == 1 else 1, f"deep{tid}", f"deep_task_{tid}",
                      4096 + tid, created, 0, created + 1_900_000_000, 4, 0, None))
        stats.append((tid, 400_000_000, 1000, 5000, 8, 8, 60_000_000, 3, 300_000_000))
        events.append((created, 1, tid, 3, 0, 1 if tid > 1 else 0, 4096 + tid))
        for k in range(8):
            t0 = created + 100_000 + k * 200_000_000
            events += [(t0, 1, tid, 4, None, None, None),
                       (t0 + 60_000_000, 1, tid, 5, 1 + k % 3, 0, 1_000_000),
                       (t0 + 150_000_000, 1, tid, 6, 1, 0, None)]
        events.append((created + 1_900_000_000, 1, tid, 7, 4, 0, None))
    events.sort(key=lambda e: e[0])
    db.insert("tasks", tasks)
    db.insert("task_stats", stats)
    db.insert("events", events)
    db.insert("stacks", [(1, depth), (2, depth), (3, 4), (4, depth)])

    def chain(d):
        if d < half:
            return (1, d, 0x7f0000000000 + d, f"libc_inner_{d}", None, None, libc)
        return (1, d, 0x500000 + d, f"deep_{d - half}", "/src/deep.c", 1_000_000 - (d - half),
                "/srv/deep")
    db.con.executemany("INSERT INTO frames VALUES(?,?,?,?,?,?,?)", (chain(d) for d in range(depth)))
    db.con.executemany("INSERT INTO frames VALUES(?,?,?,?,?,?,?)",
                       ((4, d, 0x7f0000100000 + d, f"sys_{d % 1000}", None, None, libc)
                        for d in range(depth)))
    db.con.executemany("INSERT INTO frames VALUES(?,?,?,?,?,?,?)",
                       ((2, d, 0x600000, "recurse", "/src/rec.c", 42, "/srv/deep")
                        for d in range(depth)))
    db.insert("frames", [(3, 0, 0x7f0000000100, "read", None, None, libc),
                         (3, 1, 0x700000, "short_read", "/src/short.c", 7, "/srv/deep"),
                         (3, 2, 0x700100, "handler", "/src/short.c", 20, "/srv/deep"),
                         (3, 3, 0x700200, "main", "/src/short.c", 30, "/srv/deep")])
    db.insert("blocking", [(i, 1, 1 + i % 3, 1000 + i * 200_000_000 + 70_000_000,
                            30_000_000 + i, 1, 35, 1, 2) for i in range(1, 6)]
              + [(6, 1, 2, 1_300_000_000, 20_000_000, 1, 35, 2, 1),
                 (7, 1, 3, 1_500_000_000, 20_000_000, 2, None, 2, 0),
                 (8, 1, 1, 1_700_000_000, 15_000_000, 1, 0, 3, 0),
                 (9, 1, 2, 1_800_000_000, 12_000_000, 1, 0, 4, 0)]
              + [(i, 1, 1, 10 ** 6 * i, 11_000_000, 1, 35, 1, 0) for i in range(10, 110)])
    db.insert("blocking_victims", [(i, 2 + i % 2, 1000 + i * 200_000_000 + 70_000_000,
                                    1000 + i * 200_000_000 + 100_000_000, 1_000_000, 1)
                                   for i in range(1, 6)]
              + [(i, 3 - i % 2, 1000 + i * 200_000_000 + 70_000_000,
                  1000 + i * 200_000_000 + 100_000_000, 2_000_000, 3) for i in range(1, 6)]
              + [(6, 3, 1_300_000_000, 1_330_000_000, 3_000_000, 2)])


def build_sites(db, nsites=10_000, depth=12):
    """Wide (issue 36): nsites distinct stacks, each its own call site (an
    application function of its own under one shared caller chain), three
    episodes on each delaying two of 100 tasks."""
    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    db.meta({"start_ns": "0", "end_ns": "100000000000", "duration_ns": "100000000000",
             "block_threshold_ns": "1000000", "blocking_detection": "on"})
    db.insert("loops", [(1, 100, 100, 0, None)])
    db.insert("tasks", [(t, 1, None, f"w{t}", "worker", 4096, t * 1000, 0, None, None, None, None)
                        for t in range(1, 101)])
    db.events([(t * 1000, 1, t, 3, 0, 0, 4096) for t in range(1, 101)]
              + [(10 ** 6 + t, 1, t, 4, None, None, None) for t in range(1, 101)])
    db.con.executemany("INSERT INTO stacks VALUES(?,?)", ((s, depth) for s in range(1, nsites + 1)))
    db.con.executemany("INSERT INTO frames VALUES(?,?,?,?,?,?,?)",
                       ((s, d, 0x400000 + d, "read" if d == 0 else
                         f"site_{s}" if d == 1 else f"caller_{d}",
                         None if d == 0 else f"/src/s{s % 97}.c" if d == 1 else "/src/main.c",
                         None if d == 0 else s if d == 1 else d, libc if d == 0 else "/srv/app")
                        for s in range(1, nsites + 1) for d in range(depth)))
    neps = 3 * nsites
    db.con.executemany("INSERT INTO blocking VALUES(?,?,?,?,?,?,?,?,?)",
                       ((i, 1, 1 + i % 100, 2 * 10 ** 6 + i * 3_000_000, 1_000_000 + i % 7919,
                         1, 0, 1 + i % nsites, 2) for i in range(1, neps + 1)))
    db.con.executemany("INSERT INTO blocking_victims VALUES(?,?,?,?,?,?)",
                       ((i, 1 + (i + k) % 100, 2 * 10 ** 6 + i * 3_000_000,
                         2 * 10 ** 6 + i * 3_000_000 + 2_000_000, 1_000_000, 1)
                        for i in range(1, neps + 1) for k in (1, 2)))


def build_tasks(db, ntasks=1_000_000):
    """Many tasks (issue 36): ntasks, each spawned by the one before it
    (a chain), run, suspended on a timer, woken, run and finished; every
    tenth left pending, every hundredth leaked."""
    db.meta({"start_ns": "0", "end_ns": str(ntasks * 1000 + 10 ** 9),
             "duration_ns": str(ntasks * 1000 + 10 ** 9), "block_threshold_ns": "1000000"})
    db.insert("loops", [(1, 100, 100, 0, None)])
    db.con.executemany("INSERT INTO tasks VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                       ((t, 1, t - 1 if t > 1 else None, f"t{t}", "fn", 4096, t * 1000, 0,
                         None if t % 10 == 0 else t * 1000 + 900, None if t % 10 == 0 else 4,
                         None if t % 10 == 0 else 0, 1 if t % 100 == 0 else None)
                        for t in range(1, ntasks + 1)))

    def ev():
        for t in range(1, ntasks + 1):
            b = t * 1000
            yield (b, 1, t, 3, 0, t - 1, 4096)
            yield (b + 100, 1, t, 4, None, None, None)
            yield (b + 200, 1, t, 5, 2, 0, 500)
            yield (b + 700, 1, t, 6, 2, 0, None)
            yield (b + 800, 1, t, 4, None, None, None)
            if t % 10:
                yield (b + 900, 1, t, 7, 4, 0, None)
            else:
                yield (b + 900, 1, t, 5, 1, t - 1, 0)
            if t % 100 == 0:
                yield (b + 950, 1, t, 9, 1, None, None)
    db.events(ev())


def build_awaits(db, depth=DEEP):
    """Long await chains (issue 36): a census trace (generic mode) whose
    tasks park with an await chain of depth coroutine frames -- two tasks
    deadlocked on each other's lock, one parked on a future -- plus a
    blocking episode on the same stack."""
    db.meta({"mode": "generic", "runtime": "python3.12", "target_binary": "/usr/bin/python3.12",
             "task_source": "census every 10 ms", "window_ns": "20000000",
             "start_ns": "1000", "end_ns": "2000000000", "duration_ns": "1999999000",
             "block_threshold_ns": "10000000"})
    db.insert("loops", [(1, 100, 100, 1000, None)])
    db.insert("tasks", [(t, 1, None, f"chain{t}", "main", None, 1000 + t, 0, None, None, None,
                         None) for t in (1, 2, 3)])
    db.events([(1000 + t, 1, t, 3, 0, 0, 0) for t in (1, 2, 3)]
              + [(2000 + t, 1, t, 4, None, None, None) for t in (1, 2, 3)]
              + [(700_000_000, 1, 1, 5, 8, 0x1000, 2), (700_000_001, 1, 2, 5, 8, 0x2000, 1),
                 (700_000_002, 1, 3, 5, 2, 0x3000, 0)])
    db.insert("loop_windows", [(1, 1000 + k * 20_000_000, 1000 + (k + 1) * 20_000_000, 30,
                                15_000_000, 5_000_000, 0) for k in range(99)])
    db.insert("stacks", [(1, depth), (2, depth)])
    for st in (1, 2):
        db.con.executemany("INSERT INTO frames VALUES(?,?,?,?,?,?,?)",
                           ((st, d, 0, "Lock.acquire" if d == 0 else f"coro_{st}_{d}",
                             "/usr/lib/python3.12/asyncio/locks.py" if d == 0
                             else f"/srv/app/chain{st}.py", d + 1, "python")
                            for d in range(depth)))
    db.insert("await_stacks", [(1, 700_000_000, 1), (2, 700_000_001, 2), (3, 700_000_002, 1)])
    db.insert("blocking", [(1, 1, 1, 500_000_000, 30_000_000, 1, 0, 2, 0)])


def build_generic(db, rng=None):
    H = HOSTILE
    rng = rng or random.Random(3)
    db.meta({"mode": "generic", "runtime": text(H[8], 1), "wait_calls": text(H[9], 1),
             "jit_symbols": text(H[11], 1), "window_ns": "-5", "target_binary": text(H[2], 1),
             "start_ns": "1000", "end_ns": "3000000000", "duration_ns": "2999999000",
             "block_threshold_ns": "1000000", "stop_reason": text(H[12], 1)})
    db.insert("loops", [(100, 1, 100, 1000, None), (I64_MAX, 1, -1, I64_MIN, I64_MAX),
                        (-7, 1, 0, None, None)])
    wins = [(100, 1000 + k * 20_000_000, 1000 + (k + 1) * 20_000_000, 30, 15_000_000,
             5_000_000, 900_000) for k in range(40)]
    wins += [(100, 5_000_000, 900_000_000, 7, 1, 1, 1),                 # overlaps the others
             (100, 2_000_000_000, 1_000_000_000, 5, 5, 5, 5),           # backwards
             (100, 2_500_000_000, 2_500_000_000, 3, 0, 0, 0),           # zero length
             (100, 2_600_000_000, 2_700_000_000, -4, -1, I64_MIN, -9),  # negative
             (100, 2_700_000_000, 2_800_000_000, I64_MAX, I64_MAX, I64_MAX, I64_MAX),
             (I64_MAX, I64_MIN, I64_MAX, I64_MAX, I64_MAX, I64_MAX, I64_MAX),
             (I64_MAX, 0, 1, 1, 0, 1, 1),
             (4242, 10, 20, 1, 5, 5, 5),                                # no loops row
             (-7, I64_MAX - 1, I64_MAX, 1, 1, 1, 1)]
    db.insert("loop_windows", wins)
    hist = [(100, 0 if b == 0 else 1 << b, 2 << b, 1000 >> (b % 10), (1000 >> (b % 10)) << b)
            for b in range(40)]
    hist += [(100, 1 << 50, 1 << 49, 5, 5),          # hi < lo
             (100, 1 << 51, 1 << 51, 5, 5),          # empty range
             (100, 1 << 52, 1 << 53, -3, 7),         # negative count
             (100, 1 << 54, I64_MAX, I64_MAX, I64_MAX),
             (100, -8, 4, 1, 1)]
    hist += [(I64_MAX, k * 10, k * 10 + 5, I64_MAX, I64_MAX) for k in range(400)]
    hist += [(4242, 0, 2, 0, 0)]                     # only empty buckets
    db.insert("iteration_hist", hist)
    db.insert("tasks", [(0x7F0000001000 + i, 100, None, text(H[i], i), None, None, None, 0,
                         None, None, None, None) for i in range(len(H))])
    db.insert("stacks", [(1, 6)])
    db.insert("frames", [(1, d, 0, text(H[d], d), text(b"/srv/" + H[d + 5], d), d * 7,
                          ["python", "[jit]", text(H[2], 1), "/usr/lib/libc.so.6", None,
                           "python"][d]) for d in range(6)])
    db.insert("blocking", [(i + 1, [100, I64_MAX, 4242][i % 3],
                            rng.choice([None, 0x7F0000001000 + i % len(H), 5]),
                            rng.choice([1000, I64_MAX, I64_MIN, 50_000_000 * i]),
                            rng.choice([30_000_000, -5, I64_MAX]), 1 + i % 2,
                            rng.choice([None, 230, 99999]), rng.choice([1, None, 77]), 0)
                           for i in range(30)])


def build_census(db):
    """A generic trace with a census lifecycle (meta task_source 'census
    ...', tracer/decode_asyncio.c): build_names' hostile tasks and events,
    wakes with waker kind 0, a deadlock through lock holders (arg1), a
    hostile task_source and censuses, windows; derived on first read."""
    H = HOSTILE
    build_names(db)
    db.con.execute("UPDATE meta SET value = 'generic' WHERE key = 'mode'")
    db.meta({"task_source": text(b"census every 10 ms " + H[8] + H[11] + H[9], 1),
             "censuses": text(H[12] + H[2], 1), "window_ns": "20000000"})
    n = len(H)
    db.insert("events", [(600_000_000 + i, 1, i + 1, 6, 0, 0, None) for i in range(n)])
    db.insert("events", [(700_000_000, 1, n - 3, 5, 8, 0x1000, n - 4),
                         (700_000_001, 1, n - 4, 5, 8, 0x2000, n - 3),
                         (800_000_000, 1, n - 5, 9, 2, None, None)])
    db.insert("loop_windows", [(1, 1000 + k * 20_000_000, 1000 + (k + 1) * 20_000_000, 30,
                                15_000_000, 5_000_000, 900_000) for k in range(40)])
    # await chains (tasks --stacks, lint's deadlock members): the hostile
    # stacks of build_names, one missing, and rows no suspend made
    db.insert("await_stacks", [(n - 3, 700_000_000, 1), (n - 4, 700_000_001, 2),
                               (n - 2, 500_000_000, 99), (n, 500_000_000, 1),
                               (I64_MAX, I64_MIN, 1), (1, 1, -1)])


def add_hostile_windows(db, rng, loops):
    """Windows and histograms of any shape on a libevl trace."""
    db.con.executemany("INSERT OR IGNORE INTO loop_windows VALUES(?,?,?,?,?,?,?)",
                       [(rng.choice(loops), rng.choice([I64_MIN, -1, 0, rng.randrange(10 ** 12)]),
                         rng.choice([I64_MAX, 0, rng.randrange(10 ** 12)]),
                         rng.randrange(-10, 10 ** 6), rng.randrange(-10, 10 ** 12),
                         rng.randrange(-10, 10 ** 12), rng.choice([-1, I64_MAX, 5]))
                        for _ in range(3000)])
    db.con.executemany("INSERT OR IGNORE INTO iteration_hist VALUES(?,?,?,?,?)",
                       [(rng.choice(loops), rng.randrange(-5, 1 << 62), rng.randrange(-5, 1 << 62),
                         rng.choice([I64_MAX, -1, 3]), rng.choice([I64_MAX, I64_MIN, 9]))
                        for _ in range(3000)])


def build_empty(db):
    pass


TRACES = {
    "names": build_names,
    "extremes": build_extremes,
    "span": build_span,
    "random": None,
    "bogus": None,
    "empty": build_empty,
    "generic": build_generic,
    "census": build_census,
    "deep": build_deep,
}
# Large shapes for tests/bench/viewer_deep_stack.py (not run by this test)
SHAPES = {"deep": build_deep, "sites": build_sites, "tasks": build_tasks, "awaits": build_awaits}


def commands(task_id):
    return [
        (["info"], "term"), (["info", "--json"], "json"),
        (["tasks"], "term"), (["tasks", "--json"], "json"),
        (["tasks", "--sort", "lifetime"], "term"),
        (["tasks", "--stacks"], "term"), (["tasks", "--stacks", "--json"], "json"),
        (["tasks", "--stacks", "--at", "+600ms"], "term"),
        (["timeline"], "term"), (["timeline", "--svg", "{out}/t.svg"], "term:svg"),
        (["timeline", "--from", "0", "--to", "9000000000s"], "term"),
        (["blocking"], "term"), (["blocking", "--json"], "json"),
        (["blocking", "--by", "task"], "term"), (["blocking", "--by", "syscall"], "term"),
        (["graph", "--kind", "blocking", "-o", "{out}/g.dot"], "term:dot"),
        (["graph", "--kind", "blocking", "-o", "{out}/g.svg"], "term:svg"),
        (["graph", "--kind", "tasks", "-o", "{out}/g.dot"], "term:dot"),
        (["graph", "--kind", "tasks", "-o", "{out}/g.svg"], "term:svg"),
        (["graph", "--kind", "lifecycle", "-o", "{out}/g.dot"], "term:dot"),
        (["graph", "--kind", "lifecycle", "-o", "{out}/g.svg"], "term:svg"),
        (["graph", "--kind", "lifecycle", "--task", str(task_id), "-o", "{out}/g.dot"], "term:dot"),
        (["graph", "--kind", "lifecycle", "--task", str(task_id), "-o", "{out}/g.svg"], "term:svg"),
        (["export", "--format", "chrome-json", "-o", "{out}/e.json"], "term:json"),
        (["export", "--format", "chrome-json", "-o", "-"], "json"),
        (["export", "-o", "{out}/e.pftrace"], "term"),
        (["lint"], "term"), (["lint", "--json"], "json"),
        (["sql", "SELECT * FROM tasks"], "term"), (["sql", "SELECT * FROM meta"], "term"),
        (["sql", "SELECT * FROM events_named LIMIT 500"], "term"),
        (["sql", "--json", "SELECT * FROM frames"], "json"),
        (["sql", "SELECT * FROM loop_windows LIMIT 500"], "term"),
        (["sql", "--json", "SELECT * FROM iteration_hist LIMIT 500"], "json"),
        (["timeline", "--loop", "100", "--from", "1ms", "--to", "2s"], "term"),
        (["export", "--format", "chrome-json", "-o", "-", "--from", "1ms", "--to", "2s"], "json"),
        (["export", "-o", "{out}/w.pftrace", "--from", "1ms", "--to", "2s"], "term"),
        # diff: the hostile trace against itself, and against a fixture
        (["diff", "{db}"], "term"), (["diff", "{db}", "--json"], "json"),
        (["diff", "{fixture}", "--svg", "{out}/d.svg"], "term:svg"),
    ]


def reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def check_json_bytes(data):
    doc = json.loads(data.decode("utf-8"), parse_constant=reject_constant)
    # Python accepts lone surrogates (\ud800): UTF-8 strict parsers do not.
    json.dumps(doc, ensure_ascii=False).encode("utf-8")


def check_terminal(data, what):
    try:
        s = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"{what} is not valid UTF-8: {e}"
    for i, ch in enumerate(s):
        o = ord(ch)
        if (o < 0x20 and ch != "\n") or 0x7f <= o < 0xa0:
            return f"{what} holds control character U+{o:04X} at {i}: {s[max(0, i - 30):i + 10]!r}"
    return None


def check_file(path, how):
    if not os.path.exists(path):
        return f"{os.path.basename(path)} was not written"
    data = open(path, "rb").read()
    try:
        if how == "svg":
            ET.fromstring(data)
        elif how == "json":
            check_json_bytes(data)
        elif how == "dot":
            p = subprocess.run(["dot", "-Tcanon", path], capture_output=True, timeout=60)
            if p.returncode != 0 or p.stderr.strip():
                return f"Graphviz does not read {os.path.basename(path)} cleanly: " \
                       f"{p.stderr.decode(errors='replace').strip()[:300]}"
    except Exception as e:                       # noqa: BLE001 -- report any parse error
        return f"{os.path.basename(path)} is malformed: {e}"
    return None


# Under ASan (build-asan), Graphviz's renderers keep memory until exit:
# those library leaks are suppressed, loopscope's own are not.
ENV = {**os.environ, "COLUMNS": "100",
       "LSAN_OPTIONS": ":".join(filter(None, [os.environ.get("LSAN_OPTIONS"),
                                              "suppressions=" + os.path.join(HERE, "..", "lsan.supp"),
                                              "print_suppressions=0"]))}


def run_one(a, db, name, cmd, how, out):
    for f in os.listdir(out):
        os.unlink(os.path.join(out, f))
    fixture = os.path.join(a.fixtures, "lifecycle.db")
    argv = [a.loopscope, cmd[0], db, *(c.replace("{out}", out).replace("{db}", db)
                                       .replace("{fixture}", fixture) for c in cmd[1:])]
    shown = " ".join(cmd)
    timeout = TIMEOUT
    if name == "deep":
        timeout = DEEP_BOUND["asan" if a.asan else "release"]
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, timeout=timeout, env=ENV)
    except subprocess.TimeoutExpired:
        return f"{name}: {shown}: did not finish in {timeout}s" + \
            (f" (stacks of {DEEP} frames: a path quadratic in their depth?)" if name == "deep"
             else "")
    dt = time.monotonic() - t0
    err = p.stderr.decode(errors="replace")
    # "note: ..." lines (a cut-short recording, viewer/complete.c) are not errors
    lines = [l for l in err.splitlines() if l.strip() and not l.startswith("note: ")]
    if p.returncode < 0:
        return f"{name}: {shown}: killed by signal {-p.returncode}\n{err[-2000:]}"
    if "Sanitizer" in err or "runtime error" in err:
        return f"{name}: {shown}: sanitizer report\n{err[-3000:]}"
    if p.returncode not in (0, 1):
        return f"{name}: {shown}: exit status {p.returncode}\n{err[-1000:]}"
    if p.returncode == 1 and (len(lines) != 1 or not lines[0].startswith("error: ")):
        return f"{name}: {shown}: expected one 'error:' line, got {lines[:4]}"
    bad = check_terminal(p.stderr, "stderr")
    if bad:
        return f"{name}: {shown}: {bad}"
    kind, _, file_kind = how.partition(":")
    if kind == "term":
        bad = check_terminal(p.stdout, "stdout")
    elif p.returncode == 0:
        try:
            check_json_bytes(p.stdout)
            bad = None
        except Exception as e:                   # noqa: BLE001
            bad = f"stdout is not valid JSON: {e}: {p.stdout[:200]!r}"
    if bad:
        return f"{name}: {shown}: {bad}"
    if file_kind and p.returncode == 0:
        path = next(c for c in argv if c.startswith(out))
        bad = check_file(path, file_kind)
        if bad:
            return f"{name}: {shown}: {bad}"
    if name == "deep":
        bad = check_deep(cmd, p, out)
        if bad:
            return f"{name}: {shown}: {bad}"
    if a.verbose:
        print(f"  ok {name}: {shown} (exit {p.returncode}, {dt:.2f}s)")
    return None


def check_deep(cmd, p, out):
    """What the viewer must still say of build_deep's trace: every frame of
    the deep stacks (no depth bound), the call site past 50 000 system
    frames, the site of 105 episodes."""
    half = DEEP // 2
    site = "src/deep.c:1000000 deep_0"
    text = p.stdout.decode("utf-8", "replace")
    checked = (["blocking"], ["blocking", "--json"], ["lint"], ["diff", "{db}"],
               ["export", "--format", "chrome-json", "-o", "-"],
               ["graph", "--kind", "blocking", "-o", "{out}/g.dot"])
    if cmd in checked and p.returncode != 0:
        return f"exit {p.returncode}: {p.stderr.decode(errors='replace')[-300:]}"
    if cmd == ["blocking"]:
        for want in ("called from " + site, "called from src/rec.c:42 recurse",
                     "called from (no application frame)", " deep_%d " % (half - 1),
                     " libc_inner_%d " % (half - 1)):
            if want not in text:
                return f"no {want.strip()!r} in the output"
        if not re.search(r"^%s +105 " % re.escape(site), text, re.M):
            return f"the by-site table lacks {site} with 105 episodes"
    elif cmd == ["blocking", "--json"]:
        eps = [e for e in json.loads(text)["episodes"] if e.get("site") == site]
        if not eps:
            return f"no episode at {site}"
        fns = [f["function"] for f in eps[0]["stack"]]
        if len(fns) != DEEP or fns[0] != "deep_0" or fns[half - 1] != f"deep_{half - 1}" \
                or fns[half] != "libc_inner_0" or fns[-1] != f"libc_inner_{half - 1}":
            return f"the stack at {site}: {len(fns)} frames, {fns[:2]} ... {fns[-2:]}"
    elif cmd[:3] == ["graph", "--kind", "blocking"] and cmd[-1].endswith(".dot"):
        dot = open(os.path.join(out, "g.dot"), encoding="utf-8", errors="replace").read()
        # the top 60 of 100 000 functions: the chain's (1.25 s each), not recurse
        if "deep_0" not in dot or "lighter functions not shown" not in dot:
            return "the call graph lacks deep_0 or its 'lighter functions' note"
    elif cmd == ["lint"]:
        if "at " + site not in text:
            return f"no warning at {site}"
    elif cmd == ["export", "--format", "chrome-json", "-o", "-"]:
        doc = json.loads(text)
        evs = doc["traceEvents"] if isinstance(doc, dict) else doc
        if not any((e.get("args") or {}).get("site") == site for e in evs):
            return f"no blocking slice at {site}"
    elif cmd == ["diff", "{db}"]:
        if site not in text or "recurse" not in text:
            return f"no {site} or recurse site"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loopscope", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--only", action="append", help="only this trace (names, extremes, ...)")
    ap.add_argument("--keep", help="also copy the databases here")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    with open(a.loopscope, "rb") as f:          # an ASan build: the deep trace's bound
        a.asan = b"__asan_init" in f.read()
    tmp = tempfile.mkdtemp(prefix="lshostile-")
    failures = runs = 0
    try:
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        for name, build in TRACES.items():
            if a.only and name not in a.only:
                continue
            path = os.path.join(tmp, f"{name}.db")
            db = Db(path, a.fixtures)
            if name in ("random", "bogus"):
                (build_random if name == "random" else build_bogus)(db, random.Random(a.seed))
            else:
                build(db)
            if name in ("extremes", "random"):
                add_hostile_windows(db, random.Random(a.seed), [1, 2, 99, I64_MAX, -1])
            db.finish(forged=name not in ("extremes", "random", "census"))
            if a.keep:
                os.makedirs(a.keep, exist_ok=True)
                shutil.copy(path, a.keep)
            task_id = {"names": len(HOSTILE) - 1, "extremes": 15}.get(name, 1)
            for cmd, how in commands(task_id):
                runs += 1
                bad = run_one(a, path, name, cmd, how, out)
                if bad:
                    failures += 1
                    print("FAIL " + bad)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{runs} runs, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
