#!/usr/bin/env python3
"""test_hostile.py -- `loopscope record` against a hostile target, then every
viewer command on what it recorded (needs root).

    test_hostile.py MODE --loopscope BIN --target BIN

MODE is a mode of hostile_target.c.  The recorder must finish, exit 0 and
write a consistent trace in which everything the target sent was either
refused (and counted) or stored in range; every viewer command must then
finish within seconds with well-formed output (JSON parses, SVG parses, DOT
parses, no control bytes on the terminal) and no sanitizer report.  One
ctest entry per mode; also run from build-asan/ (label fuzz) with the
recorder and viewer built with ASan+UBSan.  Exit 0 pass, 1 fail, 77 skip
(not root).
"""
import json
import re
import os
import resource
import subprocess
import sys
import xml.etree.ElementTree as ET
from lstest import (Fail, check, query, meta, integrity, tmpdir, parse_args,
                    run_case, children_cpu)  # the copy every script shares

A = None
MODES = ["random", "lengths", "records", "names", "tasks", "loops", "flood", "pub", "unbatched",
         "kept"]
# The recorder's memory (tracer/README.md, "Memory"): the ring buffer is
# mapped twice (its data pages are resident), the task table holds at most
# LS_TASKS_MAX (262144) live tasks of 152 bytes at most half full (76 MiB),
# the backlog's arena is mapped and touched whole (--backlog, 64 MiB by
# default), and libbpf (kernel BTF), libdw and SQLite's page cache need the
# rest.
TASKS_RINGBUF_KB = 131072           # holds all of mode tasks' 68 MB: no drops
BACKLOG_MB = 64
RSS_LIMIT_MB = 2 * TASKS_RINGBUF_KB // 1024 + BACKLOG_MB + 96


# Graphviz and fontconfig keep memory until exit: not ours to report.
SUPP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lsan.supp")
os.environ.setdefault("LSAN_OPTIONS", f"suppressions={os.path.abspath(SUPP)}")


def sanitized(binary):
    with open(binary, "rb") as f:
        return b"__asan_init" in f.read()


def no_sanitizer_report(what, stderr):
    for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehavior"):
        check(marker not in stderr, f"{what}: sanitizer report:\n{stderr[-3000:]}")


def record(mode, db, secs):
    args = [A.loopscope, "record", "-q", "-o", db]
    if mode == "unbatched":
        args.append("--no-batch")
    if mode == "flood":
        args += ["--ringbuf-kb", "256"]
    if mode == "tasks":
        args += ["--ringbuf-kb", str(TASKS_RINGBUF_KB)]
    args += ["--", A.target, mode, str(secs)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    cpu0 = children_cpu()
    p = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=600)
    cpu = children_cpu() - cpu0       # the recorder's and the target's: 120 s at most
    check(cpu <= 120, f"record and target: {cpu:.1f} s of CPU, more than 120")
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    no_sanitizer_report("record", p.stderr)
    check(p.returncode == 0, f"record exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    if mode == "kept":    # the recorder freed the last good batch, and said it reads kept ones
        m = re.search(r"released (\d+) reader (\d+) last (\d+)", p.stdout)
        check(m and m.group(1) == m.group(3) and m.group(2) == "1",
              f"the target's pub at exit: {p.stdout!r}")
    # ru_maxrss of the children is a running max: meaningful when it grew
    return p.stderr, (rss_mb if rss_mb * 1024 > before else None)


def check_trace(mode, db, stderr, rss_mb):
    integrity(db)
    m = meta(db)
    start, end = int(m["start_ns"]), int(m["end_ns"])
    # Only lifecycle kinds with their enums in range, never task 0.
    bad = query(db, """SELECT count(*) FROM events WHERE kind NOT BETWEEN 1 AND 13
        OR (kind = 5 AND reason NOT IN (SELECT id FROM suspend_reasons))
        OR (kind = 6 AND reason NOT IN (SELECT id FROM waker_kinds))
        OR (kind = 7 AND reason NOT IN (4, 5, 6))
        OR (kind = 9 AND reason NOT IN (SELECT id FROM leak_kinds))
        OR (kind BETWEEN 3 AND 9 AND (task_id IS NULL OR task_id = 0))""")[0][0]
    check(bad == 0, f"{bad} events with an out-of-range kind, enum or task id")
    # Times inside the recording (records made before it are dropped).
    out = query(db, "SELECT count(*), min(ts_ns), max(ts_ns) FROM events "
                    "WHERE ts_ns < ? - 1000000000 OR ts_ns > ?", start, end)[0]
    check(out[0] == 0, f"{out[0]} events outside the recording [{start}, {end}]: {out}")
    # Per loop, time never goes backwards in insertion order.
    back = query(db, """SELECT count(*) FROM (SELECT ts_ns, loop_id,
        lag(ts_ns) OVER (PARTITION BY loop_id ORDER BY rowid) AS prev FROM events
        WHERE kind NOT IN (1, 2)) WHERE ts_ns < prev""")[0][0]
    check(back == 0, f"{back} events earlier than the one before them in their loop")
    # Every task an event or episode names has a row.
    dangling = query(db, """SELECT count(*) FROM (SELECT task_id FROM events UNION
        SELECT task_id FROM blocking) x WHERE task_id IS NOT NULL
        AND task_id NOT IN (SELECT id FROM tasks)""")[0][0]
    check(dangling == 0, f"{dangling} task ids in events/blocking without a tasks row")
    # Text is valid UTF-8, NUL-free, bounded.
    for table, col in (("tasks", "name"), ("tasks", "function"), ("frames", "function"),
                       ("frames", "file"), ("meta", "value")):
        for (v,) in query(db, f"SELECT {col} FROM {table} WHERE {col} IS NOT NULL", raw=True):
            try:
                v.decode("utf-8", errors="strict")
            except UnicodeDecodeError:
                raise Fail(f"{table}.{col} is not valid UTF-8: {v[:80]!r}")
            check(b"\0" not in v and len(v) <= 4096, f"{table}.{col}: {v[:80]!r}")
    blocking = query(db, "SELECT count(*), min(start_ns), max(start_ns), min(dur_ns) FROM blocking")[0]
    if blocking[0]:
        check(start - 1_000_000_000 <= blocking[1] and blocking[2] <= end and blocking[3] >= 0,
              f"blocking episodes outside the recording: {blocking} vs [{start}, {end}]")
    # Counters: the kernel's and the recorder's own; the target's claim apart.
    for k in ("records", "dropped_messages", "dropped_bytes", "dropped_events_claimed",
              "rejected_records", "rejected_messages", "read_errors"):
        check(k in m and m[k].isdigit(), f"meta {k}: {m.get(k)!r}")
    lossy = {k: int(m.get(k, "0")) for k in ("dropped_messages", "read_errors",
                                               "loop_lost_records_claimed")}
    check(("LOSSY" in stderr) == any(lossy.values()),
          f"LOSSY in the summary iff messages were dropped, batches unread or records "
          f"lost in the loop: {lossy} / {stderr!r}")
    check(("could not be read" in stderr) == (lossy["read_errors"] > 0),
          f"the summary says batches were unread iff they were: {lossy} / {stderr!r}")
    n_events = query(db, "SELECT count(*) FROM events WHERE kind NOT IN (1, 2)")[0][0]
    check(int(m["records"]) == n_events, f"meta records {m['records']} != events {n_events}")

    per_mode = {
        "random": lambda: check(int(m["rejected_records"]) > 0, "random bytes: nothing rejected"),
        "lengths": lambda: check(int(m["read_errors"]) > 0, "bad lengths/addresses: no read errors"),
        "records": lambda: check(int(m["rejected_records"]) >= 20,
                                 f"bogus records: only {m['rejected_records']} rejected"),
        "loops": lambda: (check(query(db, "SELECT count(*) FROM loops")[0][0] <= 1024,
                                "more than 1024 loops stored"),
                          check(int(m["rejected_messages"]) > 0, "no message refused")),
        "pub": lambda: check(int(m["snapshot_request_failures"]) >= 4,
                             f"snapshot requests to bad pubs: {m['snapshot_request_failures']}"),
        "kept": lambda: (check(int(m["read_errors"]) > 0, "unreadable kept batches: no read errors"),
                         check(query(db, "SELECT count(*) FROM tasks WHERE name = 'kept'")[0][0]
                               == 6 and query(db, "SELECT count(*) FROM tasks WHERE name = "
                                                  "'last'")[0][0] == 1,
                               "the good kept batches were not all read")),
    }
    if mode in per_mode:
        per_mode[mode]()
    if mode == "names":
        names = {v for (v,) in query(db, "SELECT name FROM tasks", raw=True)}
        check(b'quote"d' in names and "\ufffd".encode() + b"\xef\xbf\xbd bytes" in names,
              f"hostile names not stored as sanitized UTF-8: {sorted(names)[:30]}")
        nfn = query(db, "SELECT count(DISTINCT function_addr) FROM tasks")[0][0]
        check(nfn > 4096, f"only {nfn} distinct task functions (the symbol cache is not exercised)")
        check(blocking[0] >= 2, f"no blocking episodes in hostile-named tasks ({blocking[0]})")
        frames = query(db, "SELECT count(*) FROM frames WHERE function IS NOT NULL")[0][0]
        check(frames > 0, "no symbolized frames")
    if mode == "tasks":
        n = query(db, "SELECT count(*) FROM tasks")[0][0]
        check(m["dropped_messages"] == "0", f"drops with a ring buffer that holds everything: {m}")
        check(n == 1000000, f"{n} tasks recorded, not the target's 1000000")
        live = query(db, "SELECT count(*) FROM tasks WHERE final_state IS NULL")[0][0]
        check(live == 500000, f"{live} live tasks, not 500000")
        # Odd ids finish at once (they leave the table), even ids stay: the
        # table is full (LS_TASKS_MAX = 262144) once id 524288 is in, and
        # every later task has a row but no task_stats.
        eq_untracked = 1000000 - 2 * 262144
        check(int(m["untracked_tasks"]) == eq_untracked,
              f"untracked tasks {m['untracked_tasks']}, want {eq_untracked}")
        stats = query(db, "SELECT count(*) FROM task_stats")[0][0]
        check(stats == 1000000 - eq_untracked, f"{stats} task_stats rows")
        if rss_mb is not None and not sanitized(A.loopscope):
            check(rss_mb < RSS_LIMIT_MB, f"recorder peak RSS {rss_mb:.0f} MiB >= {RSS_LIMIT_MB}")
        print(f"tasks rows {n}, recorder peak RSS "
              f"{'n/a' if rss_mb is None else f'{rss_mb:.0f} MiB'}")


def run_viewer(db, work):
    """Every command: bounded time, no crash, well-formed output."""
    svg, tl, exp, pf = (os.path.join(work, f) for f in ("g.svg", "t.svg", "e.json", "e.pftrace"))
    cmds = [
        (["info"], "text"), (["info", "--json"], "json"), (["tasks"], "text"),
        (["tasks", "--json"], "json"), (["timeline"], "text"), (["timeline", "--svg", tl], "svg:" + tl),
        (["blocking"], "text"), (["blocking", "--json"], "json"), (["lint"], "text"),
        (["lint", "--json"], "json"), (["export", "--format", "chrome-json", "-o", exp], "jsonfile:" + exp),
        (["export", "-o", pf], "text"),
        (["sql", "SELECT count(*) FROM events"], "text"),
    ]
    for kind in ("blocking", "tasks", "lifecycle"):
        dot = os.path.join(work, f"{kind}.dot")
        cmds.append((["graph", "--kind", kind, "-o", dot], "dot:" + dot))
        cmds.append((["graph", "--kind", kind, "-o", svg], "svg:" + svg))
    for args, out in cmds:
        what = "loopscope " + " ".join(args[:3])
        # The bound is on the command's own CPU time, 60 s: on a busy
        # machine (tests/run.sh --stress) its wall time is the other
        # processes' too; a wall bound ten times that still catches a hang.
        cpu0 = children_cpu()
        try:
            p = subprocess.run([A.loopscope, args[0], db, *args[1:]], capture_output=True,
                               timeout=600)
        except subprocess.TimeoutExpired:
            raise Fail(f"{what}: did not finish in 600 s")
        cpu = children_cpu() - cpu0
        check(cpu <= 60, f"{what}: {cpu:.1f} s of CPU, more than 60")
        err = p.stderr.decode("utf-8", "replace")
        no_sanitizer_report(what, err)
        check(p.returncode in (0, 1), f"{what}: exit {p.returncode}: {err[-1500:]}")
        if p.returncode == 1:
            lines = [l for l in err.splitlines() if l.strip()]
            check(len(lines) == 1 and lines[0].startswith("error: "), f"{what}: {lines}")
            raise Fail(f"{what}: refused the trace: {lines[0]}")
        stdout = p.stdout
        bad = [i for i, b in enumerate(stdout) if (b < 32 and b not in (9, 10)) or b == 0x7f]
        check(not bad, f"{what}: control byte on the terminal: "
                       f"{stdout[max(0, bad[0] - 80):bad[0] + 20]!r}" if bad else "")
        stdout.decode("utf-8")       # raises on invalid UTF-8
        if out == "json":
            json.loads(stdout)
        elif out.startswith("jsonfile:"):
            with open(out[9:], "rb") as f:
                json.loads(f.read().decode("utf-8"))
        elif out.startswith("svg:"):
            if not os.path.exists(out[4:]):  # nothing to draw: said so
                check(stdout.strip(), f"{what}: no SVG written and nothing said")
                continue
            ET.parse(out[4:])
            os.unlink(out[4:])
        elif out.startswith("dot:"):
            d = subprocess.run(["dot", "-Tcanon", out[4:]], capture_output=True, timeout=60)
            check(d.returncode == 0 and not d.stderr.strip(),
                  f"{what}: DOT does not parse: {d.stderr.decode(errors='replace')[:500]}")


def hostile(mode):
    work = tmpdir()
    db = os.path.join(work, "trace.db")
    secs = 0 if mode == "tasks" else A.seconds
    stderr, rss = record(mode, db, secs)
    check_trace(mode, db, stderr, rss)
    run_viewer(db, work)


def main():
    global A
    cases = {m: (lambda m=m: hostile(m)) for m in MODES}     # one case per mode
    A = parse_args(cases, ("loopscope", "target"),
                   [("--seconds", dict(type=float, default=1.0))])
    return run_case(cases, A)


if __name__ == "__main__":
    sys.exit(main())
