"""windows_check.py -- what a generic trace's loop_windows must hold, and
that the viewer reports them alike; shared by tests/viewer/test_windows.py
(the fixtures, hand-made shapes) and tests/tracer/test_windows.py (a fresh
recording).

cover_errors(db): every window's busy + wait equals its span, and every
blocking episode of its thread lies inside one window, the episodes of a
window adding up to at most its busy time.  Why these are exact (tolerance
0 ns): the BPF side (tracer/record_generic.bpf.c) starts a window at a wait
entry (or where the thread was first seen), adds each wait at its return
and each busy stretch (return to the next entry) at that entry, and ends
the window at an entry: every boundary is one bpf_ktime_get_ns() value
shared by the two sides it separates, all integers.  The last window is
completed at the stop by tracer/decode_generic.c with the open wait or busy
stretch up to its end.  A blocking episode happens between a wait's return
and the next entry (it ends at that entry at the latest: off-CPU, the
switch-in that ends its sleep; on-CPU, its CPU time from the return), so
inside one busy stretch: "blocked" is a part of busy, not a third term.
The one exception was a window the BPF side sent when its thread exited,
without the busy stretch from the last return to the exit (tracer/
record_generic.bpf.c's on_thread_exit adds it now).  Fixtures recorded
before keep it: such a window, the last of a thread whose loops row has an
end, may fall short (`exempt_exits`, on by default; a fresh recording, in
tests/tracer/test_windows.py, is checked without it).

shares(loopscope, db): the busy share of each loop thread as `info
--json`, `timeline` (terminal and --svg) and `export` (the busy_pct
counters weighted by their windows' lengths) give it.
"""
import json
import os
import re
import sqlite3
import subprocess
import tempfile


def connect(db):
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True)


def cover_errors(db, exempt_exits=True, limit=20):
    """What breaks the rules above, as strings (empty: none)."""
    c = connect(db)
    errs = []
    stopped = {}
    if exempt_exits:
        cols = [r[1] for r in c.execute("PRAGMA table_info(loops)")]
        end_col = next((k for k in ("stopped_ns", "ended_ns", "stop_ns", "end_ns") if k in cols),
                       None)
        if end_col:
            stopped = {lid: e for lid, e in
                       c.execute(f"SELECT id, {end_col} FROM loops WHERE {end_col} IS NOT NULL")}
    wins = {}
    for lid, s, e, it, wait, busy in c.execute(
            "SELECT loop_id, start_ns, end_ns, iterations, wait_ns, busy_ns FROM loop_windows"
            " ORDER BY loop_id, start_ns"):
        wins.setdefault(lid, []).append([s, e, it, wait, busy, 0])
    for lid, ws in wins.items():
        for k, (s, e, it, wait, busy, _) in enumerate(ws):
            gap = (e - s) - wait - busy
            last_exit = k == len(ws) - 1 and lid in stopped
            if gap and not (last_exit and gap > 0):
                errs.append(f"thread {lid}: window [{s}, {e}) spans {e - s} ns, busy {busy} + "
                            f"wait {wait} = {busy + wait} ({gap:+d} ns unaccounted)")
            if k and s < ws[k - 1][1]:
                errs.append(f"thread {lid}: window at {s} overlaps the previous one")
    for lid, s, d in c.execute("SELECT loop_id, start_ns, dur_ns FROM blocking ORDER BY start_ns"):
        ws = wins.get(lid, [])
        w = next((w for w in ws if w[0] <= s and s + d <= w[1]), None)
        if w is None:
            errs.append(f"thread {lid}: blocking episode [{s}, {s + d}) inside no window")
        else:
            w[5] += d
    for lid, ws in wins.items():
        for s, e, it, wait, busy, blocked in ws:
            if blocked > busy:
                errs.append(f"thread {lid}: window at {s}: blocked {blocked} ns > busy {busy} ns")
    c.close()
    return errs[:limit] + ([f"... {len(errs) - limit} more"] if len(errs) > limit else [])


def run(loopscope, *args, env=None):
    p = subprocess.run([loopscope, *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "NO_COLOR": "1", **(env or {})})
    if p.returncode:
        raise AssertionError(f"loopscope {' '.join(args)}: exit {p.returncode}: {p.stderr}")
    return p.stdout


SHARE = re.compile(r"^thread (?:\d+/)?(\d+): busy ([\d.]+)%, waiting ([\d.]+)%, "
                   r"unknown ([\d.]+)% of ", re.M)


def timeline_rows(loopscope, db, columns=200):
    """The terminal timeline (ASCII): {tid: row of glyphs}, {tid: (busy,
    waiting, unknown) %}."""
    out = run(loopscope, "timeline", db, "--ascii", env={"COLUMNS": str(columns)})
    rows = {}
    for line in out.splitlines():
        m = re.match(r"^thread (?:\d+/)?(\d+)\s", line)
        if m and len(line) > 21 and not SHARE.match(line):
            rows[int(m.group(1))] = line[21:]
    shares = {int(m.group(1)): tuple(float(m.group(k)) for k in (2, 3, 4))
              for m in SHARE.finditer(out)}
    return rows, shares, out


def svg_thread(loopscope, db):
    """The SVG timeline: {tid: (busy, waiting, unknown) %} from each thread
    row's name title, and {tid: [(css class, x, width)]} of its rows."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.svg")
        run(loopscope, "timeline", db, "--svg", path)
        svg = open(path, encoding="utf-8").read()
    shares = {int(m.group(1)): tuple(float(m.group(k)) for k in (2, 3, 4))
              for m in re.finditer(r"<title>thread (?:\d+/)?(\d+): busy ([\d.]+)%, waiting "
                                   r"([\d.]+)%, unknown ([\d.]+)% of ", svg)}
    rects = {}
    for m in re.finditer(r'<rect class="s(\d)" x="(\d+)" y="[\d.]+" width="(\d+)" '
                         r'height="\d+"><title>thread (?:\d+/)?(\d+): busy', svg):
        rects.setdefault(int(m.group(4)), []).append((int(m.group(1)), int(m.group(2)),
                                                      int(m.group(3))))
    return shares, rects, svg


def info_shares(loopscope, db):
    j = json.loads(run(loopscope, "info", db, "--json"))
    return {l["tid"]: (l["busy_pct"], l["wait_pct"], l["unknown_pct"])
            for l in j.get("loop_threads", []) if l["windows"]}


def export_shares(loopscope, db):
    """Each thread's busy and unknown counters (sampled at each window's
    start, ts in us from the recording's start) weighted by their windows'
    lengths: {tid: (busy %, unknown %)}."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        run(loopscope, "export", db, "--format", "chrome-json", "-o", path)
        doc = json.load(open(path))
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    c = connect(db)
    start = int(c.execute("SELECT value FROM meta WHERE key = 'start_ns'").fetchone()[0])
    wins = c.execute("SELECT loop_id, start_ns, end_ns FROM loop_windows"
                     " WHERE end_ns > start_ns").fetchall()
    c.close()
    samples = {}
    for e in evs:
        if e.get("ph") == "C" and e.get("name") == "loop":
            samples.setdefault(e["tid"], {})[round(e["ts"] * 1000) + start] = e["args"]
    acc = {}
    for lid, s, e in wins:
        a = samples.get(lid, {}).get(s)
        if a is None:
            raise AssertionError(f"export: no counter sample at thread {lid}'s window at {s}")
        t = acc.setdefault(lid, [0, 0, 0])
        t[0] += a["busy_pct"] * (e - s)
        t[1] += a.get("unknown_pct", 0) * (e - s)
        t[2] += e - s
    return {lid: (b / n, u / n) for lid, (b, u, n) in acc.items() if n}


def agreement_errors(loopscope, db, tol=0.051):
    """The busy share of each thread as info, timeline (terminal, SVG) and
    export give it, equal within tol percentage points (the terminal and SVG
    print one decimal)."""
    errs = []
    info = info_shares(loopscope, db)
    _, term, _ = timeline_rows(loopscope, db)
    svg, _, _ = svg_thread(loopscope, db)
    exp = export_shares(loopscope, db)
    if not info:
        return ["info --json: no loop thread with windows"]
    for tid, (busy, wait, unk) in info.items():
        for what, got in (("timeline", term.get(tid)), ("timeline --svg", svg.get(tid)),
                          ("export", exp.get(tid))):
            if got is None:
                errs.append(f"thread {tid}: {what} gives no busy share")
                continue
            if abs(got[0] - busy) > tol:
                errs.append(f"thread {tid}: busy {busy:.3f}% in info, {got[0]:.3f}% in {what}")
            gu = got[-1]
            if abs(gu - unk) > tol:
                errs.append(f"thread {tid}: unknown {unk:.3f}% in info, {gu:.3f}% in {what}")
    return errs
