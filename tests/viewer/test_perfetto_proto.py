#!/usr/bin/env python3
"""test_perfetto_proto.py -- `loopscope export --format perfetto` (the
default) writes a Perfetto protobuf trace that says what the database says.

    test_perfetto_proto.py --loopscope BIN --fixtures DIR --proto viewer/perfetto_trace.proto

The output is decoded independently of the exporter: Python classes are
generated from the same .proto (whose field numbers are Perfetto's) with
protoc into a temporary directory, and the file is parsed as a Trace; a
packet with compressed_packets is inflated (zlib, as Perfetto's trace
processor does) and its Trace.packet records take its place.
Checks, per fixture trace:

- the file: every chunk inflates to whole packets (none compressed again);
  it is smaller than the Chrome JSON export of the same trace, and at most
  a fifth of it when the JSON is over 100 KB;
- the sequence: the first packet clears the incremental state; every
  interned id (event names, categories, argument names and values) is
  defined on the sequence before a packet uses it, and such packets set
  SEQ_NEEDS_INCREMENTAL_STATE;
- tracks: one process track per loop, one task track per task with events
  (the whole recording is the window), every track's parent declared, every
  event on a declared track; sibling ranks;
- slices: BEGIN/END pair up and nest per track (no END without a BEGIN,
  none left open), timestamps within [0, recording length];
- counts against the database: blocking slices = blocking rows (generic
  mode: on loop threads; libevl: those of tasks and callbacks), one flow per
  wake with a waker task and per wake by completion of an awaited task that
  finished, every flow id started once and terminated once, its start not
  after its end; counters: one sample per loop_windows row at least.

Needs protoc (Debian protobuf-compiler) and Python's protobuf (python3-
protobuf): without them it exits 77 (skipped), which tests/run.sh refuses
under CI=true; here too, CI=true makes a missing package a failure.
"""
import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import zlib
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lstrace  # noqa: E402  (tests/lstrace.py: events needs loopscope's SQLite extension)

SKIP = 77


def need(what):
    msg = f"missing: {what} (install protobuf-compiler and python3-protobuf: tests/deps.sh)"
    print(("FAIL " if os.environ.get("CI") == "true" else "SKIP ") + msg)
    sys.exit(1 if os.environ.get("CI") == "true" else SKIP)


def load_pb2(proto, tmp):
    protoc = subprocess.run(["which", "protoc"], capture_output=True, text=True).stdout.strip()
    if not protoc:
        need("protoc")
    d = os.path.dirname(os.path.abspath(proto))
    subprocess.run([protoc, f"--proto_path={d}", f"--python_out={tmp}", os.path.abspath(proto)],
                   check=True)
    sys.path.insert(0, tmp)
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        sys.path.append("/usr/lib/python3/dist-packages")   # Debian's, under another python3
        try:
            import google.protobuf  # noqa: F401,F811
        except ImportError:
            need("python3-protobuf")
    import perfetto_trace_pb2
    return perfetto_trace_pb2


def expected(db):
    """What the database says: counts the export must show."""
    con = lstrace.connect(db)
    q = lambda sql: con.execute(sql).fetchall()
    generic = q("SELECT value FROM meta WHERE key = 'mode'") == [("generic",)]
    loops = q("SELECT count(*) FROM loops")[0][0]
    task_ids = {r[0] for r in q("SELECT DISTINCT task_id FROM events WHERE task_id IS NOT NULL")}
    blocking = q("SELECT count(*) FROM blocking WHERE dur_ns >= 0")[0][0]
    # Flows: per task, walk its events in order (the replay's rules for a wake).
    tasks = {r[0]: r[1] for r in q("SELECT id, ended_ns FROM tasks")}
    flows = 0
    last_suspend = {}
    seen_tasks = set()
    for tid, kind, reason, arg0, ts in q("SELECT task_id, kind, reason, arg0, ts_ns FROM events"
                                         " WHERE task_id IS NOT NULL ORDER BY rowid"):
        seen_tasks.add(tid)
        if kind == 5:                                  # task_suspend
            last_suspend[tid] = (reason, arg0)
        elif kind == 6:                                # task_wake
            if arg0 and arg0 > 0 and arg0 != tid:
                flows += arg0 in seen_tasks
            elif reason == 4 and last_suspend.get(tid, (0, 0))[0] == 4:
                aw = last_suspend[tid][1]
                end = tasks.get(aw)
                flows += aw in seen_tasks and aw != tid and end is not None and 0 < end <= ts
    windows = q("SELECT count(*) FROM loop_windows")[0][0] if q(
        "SELECT 1 FROM sqlite_master WHERE name = 'loop_windows'") else 0
    lo, hi = q("SELECT min(ts_ns), max(ts_ns) FROM events")[0]
    meta = dict(q("SELECT key, value FROM meta WHERE key IN ('start_ns', 'end_ns')"))
    t0 = [int(meta["start_ns"])] if "start_ns" in meta else []
    t1 = [int(meta["end_ns"])] if "end_ns" in meta else []
    t0 = min(t0 + ([lo] if lo is not None else []) or [0])
    t1 = max(t1 + ([hi] if hi is not None else []) or [t0])
    return dict(generic=generic, loops=loops, tasks=len(task_ids), blocking=blocking,
                flows=flows, windows=windows, length=t1 - t0)


def packets(pb2, data, errs):
    """The packets of a Trace, those of compressed_packets inflated in place."""
    tr = pb2.Trace()
    tr.ParseFromString(data)
    out = []
    for i, p in enumerate(tr.packet):
        if p.WhichOneof("data") != "compressed_packets":
            out.append(p)
            continue
        try:
            inner = pb2.Trace()
            inner.ParseFromString(zlib.decompress(p.compressed_packets))
        except Exception as e:    # zlib.error, google.protobuf's DecodeError
            errs.append(f"packet {i}: compressed_packets does not inflate/parse: {e}")
            continue
        if [f.name for f, _ in p.ListFields()] != ["compressed_packets"]:
            errs.append(f"packet {i}: fields besides compressed_packets")
        for q in inner.packet:
            if q.WhichOneof("data") == "compressed_packets":
                errs.append(f"packet {i}: compressed packets nested")
            out.append(q)
    return out


def check(pb2, path, exp, wake_flows_exact=True):
    errs = []
    tr = packets(pb2, open(path, "rb").read(), errs)
    P = pb2.TracePacket
    interned = {"names": set(), "cats": set(), "keys": set(), "values": set()}
    tracks = {}
    stacks = {}
    nslices = {}
    blocking = 0
    flow_out, flow_in = {}, {}
    counters = 0
    begins = 0
    for i, p in enumerate(tr):
        where = f"packet {i}"
        if i == 0 and not p.sequence_flags & P.SEQ_INCREMENTAL_STATE_CLEARED:
            errs.append("the first packet does not clear the incremental state")
        if p.HasField("interned_data"):
            d = p.interned_data
            interned["names"] |= {e.iid for e in d.event_names}
            interned["cats"] |= {e.iid for e in d.event_categories}
            interned["keys"] |= {e.iid for e in d.debug_annotation_names}
            interned["values"] |= {e.iid for e in d.debug_annotation_string_values}
        if p.trusted_packet_sequence_id != 1:
            errs.append(f"{where}: sequence {p.trusted_packet_sequence_id}")
        kind = p.WhichOneof("data")
        if kind == "track_descriptor":
            td = p.track_descriptor
            if td.uuid in tracks:
                errs.append(f"{where}: track {td.uuid} declared twice")
            if td.parent_uuid and td.parent_uuid not in tracks:
                errs.append(f"{where}: track {td.uuid}'s parent {td.parent_uuid} not declared")
            tracks[td.uuid] = td
            continue
        if kind != "track_event":
            errs.append(f"{where}: unexpected packet {kind}")
            continue
        te = p.track_event
        if te.track_uuid not in tracks:
            errs.append(f"{where}: event on undeclared track {te.track_uuid}")
            continue
        if not 0 <= p.timestamp <= exp["length"]:
            errs.append(f"{where}: timestamp {p.timestamp} outside [0, {exp['length']}]")
        uses = te.HasField("name_iid") or len(te.category_iids) or len(te.debug_annotations)
        if uses and not p.sequence_flags & P.SEQ_NEEDS_INCREMENTAL_STATE:
            errs.append(f"{where}: uses interned data without SEQ_NEEDS_INCREMENTAL_STATE")
        if te.HasField("name_iid") and te.name_iid not in interned["names"]:
            errs.append(f"{where}: name iid {te.name_iid} not interned before")
        for c in te.category_iids:
            if c not in interned["cats"]:
                errs.append(f"{where}: category iid {c} not interned before")
        for a in te.debug_annotations:
            if a.HasField("name_iid") and a.name_iid not in interned["keys"]:
                errs.append(f"{where}: argument name iid {a.name_iid} not interned before")
            if a.HasField("string_value_iid") and a.string_value_iid not in interned["values"]:
                errs.append(f"{where}: argument value iid {a.string_value_iid} not interned")
        for f in te.flow_ids:
            if f in flow_out:
                errs.append(f"{where}: flow {f} started twice")
            flow_out[f] = p.timestamp
        for f in te.terminating_flow_ids:
            if f in flow_in:
                errs.append(f"{where}: flow {f} terminated twice")
            flow_in[f] = p.timestamp
        st = stacks.setdefault(te.track_uuid, [])
        if te.type == te.TYPE_SLICE_BEGIN:
            begins += 1
            st.append((p.timestamp, i))
            nslices[te.track_uuid] = nslices.get(te.track_uuid, 0) + 1
            cats = [c for c in te.category_iids]
            if cats and cats[0] in blocking_cat_iids(tr, i):
                blocking += 1
        elif te.type == te.TYPE_SLICE_END:
            if not st:
                errs.append(f"{where}: SLICE_END on track {te.track_uuid} with nothing open")
            else:
                ts, _ = st.pop()
                if p.timestamp < ts:
                    errs.append(f"{where}: slice ends at {p.timestamp} before it begins at {ts}")
        elif te.type == te.TYPE_COUNTER:
            counters += 1
            for u in [te.track_uuid, *te.extra_double_counter_track_uuids]:
                if u not in tracks or not tracks[u].HasField("counter"):
                    errs.append(f"{where}: counter value on {u}, not a counter track")
            if len(te.extra_double_counter_track_uuids) != len(te.extra_double_counter_values):
                errs.append(f"{where}: extra counter tracks and values do not pair up")
    del errs[50:]
    # Nesting, as Perfetto reads it: packets sorted by timestamp (stably).
    errs += nesting(tr)
    for u, st in stacks.items():
        if st:
            errs.append(f"track {u}: {len(st)} slice(s) never ended")
    procs = [t for t in tracks.values() if t.HasField("process")]
    if len(procs) != exp["loops"]:
        errs.append(f"{len(procs)} loop (process) tracks, the database has {exp['loops']} loops")
    task_tracks = [t for t in tracks.values() if t.uuid % 8 == 7]
    if not exp["generic"] and len(task_tracks) != exp["tasks"]:
        errs.append(f"{len(task_tracks)} task tracks, {exp['tasks']} tasks have events")
    if blocking != exp["blocking"]:
        errs.append(f"{blocking} blocking slices, the database has {exp['blocking']} episodes")
    for f in flow_out:
        if f not in flow_in:
            errs.append(f"flow {f} starts but never ends")
        elif flow_in[f] < flow_out[f]:
            errs.append(f"flow {f} ends at {flow_in[f]} before it starts at {flow_out[f]}")
    for f in flow_in:
        if f not in flow_out:
            errs.append(f"flow {f} ends but never starts")
    if wake_flows_exact and len(flow_out) != exp["flows"]:
        errs.append(f"{len(flow_out)} flows, the database has {exp['flows']} wakes by a task")
    if counters < exp["windows"]:
        errs.append(f"{counters} counter samples for {exp['windows']} loop windows")
    return errs, f"tracks:{len(tracks)} slices:{begins} flows:{len(flow_out)} " \
                 f"blocking:{blocking} counters:{counters}"


_blocking_iids = {}


def blocking_cat_iids(tr, upto):
    """The iids of category "blocking" interned so far (on the one sequence);
    tr: the list of packets."""
    # keyed by the object itself (kept alive here): an id() of a trace
    # already freed can come back for the next one, with stale iids
    hit = _blocking_iids.get(id(tr))
    if hit is not None and hit[0] is tr:
        return hit[1]
    s = set()
    for p in tr:
        for c in p.interned_data.event_categories:
            if c.name == "blocking":
                s.add(c.iid)
    _blocking_iids[id(tr)] = (tr, s)
    return s


def nesting(tr):
    evs = []
    for i, p in enumerate(tr):
        if p.WhichOneof("data") == "track_event" and p.track_event.type in (1, 2):
            evs.append((p.timestamp, i, p.track_event.track_uuid, p.track_event.type))
    evs.sort()
    open_ = {}
    errs = []
    for ts, i, u, ty in evs:
        st = open_.setdefault(u, [])
        if ty == 1:
            st.append(ts)
        elif not st:
            errs.append(f"packet {i}: after sorting, SLICE_END on track {u} with nothing open")
    return errs[:20]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loopscope", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--proto", required=True)
    a = ap.parse_args()
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="lspftrace-") as tmp:
        pb2 = load_pb2(a.proto, tmp)
        for name in ("lifecycle", "ticker", "blocking", "rules", "generic", "asyncio"):
            db = os.path.join(a.fixtures, name + ".db")
            if not os.path.exists(db):
                continue
            out = os.path.join(tmp, name + ".pftrace")
            js = os.path.join(tmp, name + ".json")
            p = subprocess.run([a.loopscope, "export", db, "-o", out], capture_output=True,
                               text=True, timeout=120)
            errs = [f"exit {p.returncode}: {p.stderr.strip()}"] if p.returncode else []
            summary = ""
            if not errs:
                e, summary = check(pb2, out, expected(db))
                errs += e
                q = subprocess.run([a.loopscope, "export", db, "--format", "chrome-json", "-o",
                                    js], capture_output=True, timeout=120)
                pbs, jss = os.path.getsize(out), os.path.getsize(js)
                if q.returncode:
                    errs.append(f"chrome-json export: exit {q.returncode}")
                elif pbs >= jss:
                    errs.append(f"protobuf {pbs} bytes, not smaller than the JSON's {jss}")
                elif jss > 100_000 and pbs > 0.2 * jss:
                    errs.append(f"protobuf {pbs} bytes, {pbs / jss:.3f} x the JSON's {jss}: "
                                f"more than 0.2 x")
                summary += f" size:{pbs}/{jss} ({pbs / jss:.3f} x)" if not q.returncode else ""
            if errs:
                failed += 1
                print(f"FAIL {name}\n" + "\n".join(errs[:50]))
            else:
                passed += 1
                print(f"ok {name}: {summary}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
