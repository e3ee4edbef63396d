#!/usr/bin/env python3
"""test_perfetto.py -- `loopscope export --format chrome-json` writes what
ui.perfetto.dev and chrome://tracing accept.

    test_perfetto.py --loopscope BIN --fixtures DIR    export every fixture, check
    test_perfetto.py --check FILE.json...              check existing exports

No viewer is reachable from the test machines, so this checks the Trace
Event Format (the "JSON Object Format" of Google's Trace Event Format
document, as read by Perfetto's json_trace_parser and catapult's importer)
strictly:

- the top level is {"traceEvents": [...]} with an optional displayTimeUnit
  ("ms" or "ns") and otherData object; numbers are finite (no NaN/Infinity);
- per phase the required keys and their types: every event has name (str),
  ph, pid and tid (ints); all but M have a finite numeric ts >= 0; X has a
  finite dur >= 0; i has scope s in g/p/t; s/f have an id and a cat; f binds
  with bp "e"; M events are process_name/thread_name (args.name a string)
  or process_sort_index/thread_sort_index (args.sort_index an int); args,
  when present, is an object; cname, when present, is one of the reserved
  colour names;
- flows: every "s" has exactly one "f" with the same (id, cat, name) and vice
  versa, the f is not before the s, and each end lies inside an X slice of
  its own track (what the "enclosing slice" binding needs);
- X slices of one track (pid, tid) nest: two slices either do not overlap
  or one contains the other (Perfetto drops improperly nested slices);
- C (counter) events have args whose values are all finite numbers;
- a tid belongs to one pid only (Perfetto keys threads by tid), every pid
  has a process_name and every track with slices a thread_name.

Exit status 0 when every file passes, 1 otherwise (each problem printed).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

PHASES = set("BEXiIsMCbentfPOND(")          # phases of the format; we check the ones we use
CNAMES = {
    "good", "bad", "terrible", "black", "grey", "white", "yellow", "olive", "generic_work",
    "rail_response", "rail_animation", "rail_idle", "rail_load", "startup",
    "heap_dump_stack_frame", "heap_dump_object_type", "heap_dump_child_node_arrow",
    "cq_build_running", "cq_build_passed", "cq_build_failed", "cq_build_abandoned",
    "cq_build_attempt_runnig", "cq_build_attempt_passed", "cq_build_attempt_failed",
    "thread_state_uninterruptible", "thread_state_iowait", "thread_state_running",
    "thread_state_runnable", "thread_state_sleeping", "thread_state_unknown",
    "light_memory_dump", "detailed_memory_dump", "vsync_highlight_color",
    "background_memory_dump", "tracing_memory_dump", "rail_memory_dump",
}
META_ARGS = {"process_name": ("name", str), "thread_name": ("name", str),
             "process_sort_index": ("sort_index", int), "thread_sort_index": ("sort_index", int),
             "process_labels": ("labels", str)}
EPS = 1e-6                                   # us; ts are printed with ns digits


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def check_trace(path):
    """All problems found in one exported file, as strings."""
    errs = []
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"), parse_constant=reject_constant)
    except (ValueError, UnicodeDecodeError) as e:
        return [f"{path}: not valid JSON: {e}"]
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return [f"{path}: top level must be an object with a traceEvents array"]
    if doc.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        errs.append(f"displayTimeUnit {doc['displayTimeUnit']!r} is not ms or ns")
    if "otherData" in doc and not isinstance(doc["otherData"], dict):
        errs.append("otherData must be an object")

    slices = {}                    # (pid, tid) -> [(ts, end)]
    flows = {}                     # (id, cat, name) -> {"s": [ev], "f": [ev]}
    tid_pid = {}
    named_procs, named_threads = set(), set()
    pids = set()
    for i, ev in enumerate(doc["traceEvents"]):
        where = f"event {i}"
        if not isinstance(ev, dict):
            errs.append(f"{where}: not an object")
            continue
        ph = ev.get("ph")
        where = f"event {i} ({ph} {ev.get('name')!r})"
        if not isinstance(ph, str) or len(ph) != 1 or ph not in PHASES:
            errs.append(f"{where}: bad ph {ph!r}")
            continue
        if not isinstance(ev.get("name"), str):
            errs.append(f"{where}: name must be a string")
        for k in ("pid", "tid"):
            if not is_int(ev.get(k)):
                errs.append(f"{where}: {k} must be an integer, got {ev.get(k)!r}")
        if "args" in ev and not isinstance(ev["args"], dict):
            errs.append(f"{where}: args must be an object")
        if "cname" in ev and ev["cname"] not in CNAMES:
            errs.append(f"{where}: cname {ev['cname']!r} is not a reserved colour name")
        if ph != "M" or "ts" in ev:
            if not is_num(ev.get("ts")):
                errs.append(f"{where}: ts must be a finite number, got {ev.get('ts')!r}")
                continue
            if ev["ts"] < 0:
                errs.append(f"{where}: negative ts {ev['ts']}")
        if not (is_int(ev.get("pid")) and is_int(ev.get("tid"))):
            continue
        pid, tid = ev["pid"], ev["tid"]
        pids.add(pid)
        if tid_pid.setdefault(tid, pid) != pid:
            errs.append(f"{where}: tid {tid} used in pids {tid_pid[tid]} and {pid}")
        if ph == "M":
            spec = META_ARGS.get(ev.get("name"))
            args = ev.get("args")
            if spec is None:
                errs.append(f"{where}: unknown metadata event")
            elif not isinstance(args, dict) or not isinstance(args.get(spec[0]), spec[1]) \
                    or isinstance(args.get(spec[0]), bool):
                errs.append(f"{where}: args.{spec[0]} must be a {spec[1].__name__}")
            elif ev["name"] == "process_name":
                named_procs.add(pid)
            elif ev["name"] == "thread_name":
                named_threads.add((pid, tid))
        elif ph == "X":
            if not is_num(ev.get("dur")) or ev["dur"] < 0:
                errs.append(f"{where}: dur must be a finite number >= 0, got {ev.get('dur')!r}")
                continue
            slices.setdefault((pid, tid), []).append((ev["ts"], ev["ts"] + ev["dur"], i))
        elif ph in "iI":
            if ev.get("s", "t") not in ("g", "p", "t"):
                errs.append(f"{where}: instant scope s must be g, p or t")
        elif ph in "stf":
            if not (is_int(ev.get("id")) or isinstance(ev.get("id"), str)):
                errs.append(f"{where}: flow event without an id")
                continue
            if not isinstance(ev.get("cat"), str):
                errs.append(f"{where}: flow event without a cat")
                continue
            if ph == "f" and ev.get("bp", "e") != "e":
                errs.append(f"{where}: bp must be 'e'")
            flows.setdefault((ev["id"], ev["cat"], ev["name"]), {"s": [], "t": [], "f": []})[ph] \
                .append(ev)
        elif ph == "C":
            args = ev.get("args")
            if not isinstance(args, dict) or not args or \
                    not all(is_num(v) for v in args.values()):
                errs.append(f"{where}: a counter needs args of finite numbers, got {args!r}")
        elif ph in "BE":
            errs.append(f"{where}: B/E events are not expected from loopscope")

    # Slices nest on each track.
    for track, sl in slices.items():
        sl.sort(key=lambda s: (s[0], -(s[1] - s[0]), s[2]))
        stack = []
        for ts, end, i in sl:
            while stack and stack[-1][1] <= ts + EPS:
                stack.pop()
            if stack and end > stack[-1][1] + EPS:
                errs.append(f"track {track}: slice event {i} [{ts}, {end}] overlaps event "
                            f"{stack[-1][2]} [{stack[-1][0]}, {stack[-1][1]}] without nesting")
            stack.append((ts, end, i))
        if track not in named_threads:
            errs.append(f"track {track}: slices but no thread_name")
    for pid in sorted(pids - named_procs):
        errs.append(f"pid {pid}: no process_name")

    def enclosed(ev):
        for ts, end, _ in slices.get((ev["pid"], ev["tid"]), ()):
            if ts - EPS <= ev["ts"] <= end + EPS:
                return True
        return False

    for key, ends in sorted(flows.items(), key=lambda kv: str(kv[0])):
        if len(ends["s"]) != 1 or len(ends["f"]) != 1:
            errs.append(f"flow {key}: {len(ends['s'])} start(s) and {len(ends['f'])} end(s)")
            continue
        s, f = ends["s"][0], ends["f"][0]
        if f["ts"] < s["ts"]:
            errs.append(f"flow {key}: ends at {f['ts']} before it starts at {s['ts']}")
        for ev in (s, f):
            if not enclosed(ev):
                errs.append(f"flow {key}: {ev['ph']} at {ev['ts']} on ({ev['pid']}, "
                            f"{ev['tid']}) is inside no slice of that track")
    return [f"{path}: {e}" for e in errs]


def summary(path):
    doc = json.load(open(path))
    evs = doc["traceEvents"]
    count = {}
    for ev in evs:
        count[ev["ph"]] = count.get(ev["ph"], 0) + 1
    return " ".join(f"{k}:{v}" for k, v in sorted(count.items()))


def self_test(tmp):
    """The checker rejects what it must: one broken trace per rule."""
    good_meta = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 2, "args": {"name": "p"}},
                 {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "t"}}]
    x = {"ph": "X", "name": "a", "pid": 1, "tid": 2, "ts": 1.0, "dur": 5.0}
    broken = {
        "no ts": [dict(x, ts=None)],
        "negative dur": [dict(x, dur=-1)],
        "no pid": [{k: v for k, v in x.items() if k != "pid"}],
        "bad nesting": [x, dict(x, ts=3.0, dur=5.0)],
        "flow without end": [x, {"ph": "s", "name": "w", "cat": "wake", "id": 1, "pid": 1,
                                 "tid": 2, "ts": 2.0}],
        "flow outside slices": [x, {"ph": "s", "name": "w", "cat": "wake", "id": 1, "pid": 1,
                                    "tid": 2, "ts": 2.0},
                                {"ph": "f", "name": "w", "cat": "wake", "id": 1, "pid": 1,
                                 "tid": 2, "ts": 9.0, "bp": "e"}],
        "bad metadata": [x, {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {}}],
        "tid in two pids": [x, dict(x, pid=3)],
        "bad cname": [dict(x, cname="red")],
        "counter without numbers": [{"ph": "C", "name": "c", "pid": 1, "tid": 2, "ts": 1.0,
                                     "args": {"v": "high"}}],
    }
    errs = []
    p = os.path.join(tmp, "selftest.json")
    for what, evs in broken.items():
        open(p, "w").write(json.dumps({"traceEvents": good_meta + evs}))
        if not check_trace(p):
            errs.append(f"self-test: the checker accepts a trace with {what}")
    open(p, "w").write('{"traceEvents":[{"ph":"X","name":"a","pid":1,"tid":2,"ts":NaN,"dur":1}]}')
    if not check_trace(p):
        errs.append("self-test: the checker accepts NaN")
    open(p, "w").write(json.dumps({"traceEvents": good_meta + [x]}))
    errs += [f"self-test: a good trace is rejected: {e}" for e in check_trace(p)]
    return errs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loopscope")
    ap.add_argument("--fixtures")
    ap.add_argument("--check", nargs="+", metavar="FILE")
    a = ap.parse_args()
    failed = passed = 0
    if a.check:
        for p in a.check:
            errs = check_trace(p)
            print("\n".join(errs[:50]) if errs else f"ok {p}: {summary(p)}")
            failed += bool(errs)
            passed += not errs
        print(f"{passed} passed, {failed} failed")
        return 1 if failed else 0
    if not (a.loopscope and a.fixtures):
        ap.error("--loopscope and --fixtures (or --check FILE)")
    cases = [
        ("lifecycle", []), ("ticker", []), ("blocking", []),
        ("blocking_window", ["--from", "1.5s", "--to", "4.7s"]),
        ("ticker_window", ["--from", "150ms", "--to", "200ms"]),
        ("generic", []), ("generic_window", ["--from", "390ms", "--to", "460ms"]),
        ("asyncio", []), ("asyncio_window", ["--from", "500ms", "--to", "560ms"]),
    ]
    with tempfile.TemporaryDirectory(prefix="lsperfetto-") as tmp:
        errs = self_test(tmp)
        if errs:
            failed += 1
            print("FAIL self_test\n" + "\n".join(errs))
        else:
            passed += 1
            print("ok self_test")
        for name, extra in cases:
            db = os.path.join(a.fixtures, name.split("_")[0] + ".db")
            out = os.path.join(tmp, name + ".json")
            p = subprocess.run([a.loopscope, "export", db, "--format", "chrome-json", "-o", out,
                                *extra], capture_output=True, text=True, timeout=120)
            errs = [f"exit {p.returncode}: {p.stderr.strip()}"] if p.returncode else []
            errs += [] if errs else check_trace(out)
            if not errs and name == "lifecycle":
                # the same export to stdout is byte-identical
                q = subprocess.run([a.loopscope, "export", db, "--format", "chrome-json", "-o", "-"], capture_output=True,
                                   timeout=120)
                if q.returncode or q.stdout != open(out, "rb").read():
                    errs.append("-o - does not write the same JSON to stdout")
            if errs:
                failed += 1
                print(f"FAIL {name}")
                print("\n".join(errs[:50]))
            else:
                passed += 1
                print(f"ok {name}: {summary(out)}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
