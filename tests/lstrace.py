"""lstrace.py -- loopscope traces from Python's sqlite3, for the tests.

A trace's `events` is a virtual table over chunks of encoded events
(tracer/SCHEMA.md, model/evchunk.h).  Python's sqlite3 here cannot load
SQLite extensions, so this module reads and writes the chunks itself -- a
second implementation of the documented encoding, which the tests thereby
check against the C one:

    connect(path)        sqlite3 connection where `events` (a TEMP table
                         shadowing the virtual one) holds the decoded events,
                         rowids included; writes to it are not saved
    shell_query(path, sql)  the same query run by the sqlite3 shell with the
                         extension: for traces too big to decode in Python
    write_events(con, rows)   append events (tuples of the 7 columns) as chunks
    create_schema(con, sql)   run tracer/schema.sql without the module: the
                         virtual table is declared as the sqlite3 shell's
                         .dump declares it
    event_count(con)     the number of events, from the chunks' headers
    extension()          the path of model/loopscope_events.so, for the
                         sqlite3 shell (.load), which can load it
"""
import json
import os
import re
import sqlite3
import subprocess
import sys

CHUNK_EVENTS = 1024
COLS = ("ts_ns", "loop_id", "task_id", "kind", "reason", "arg0", "arg1")
OPT = (2, 4, 5, 6)          # task_id, reason, arg0, arg1: NULL, 0 or a value
VTAB = "CREATE VIRTUAL TABLE events USING loopscope_events"
M64 = (1 << 64) - 1


def _s64(u):
    u &= M64
    return u - (1 << 64) if u >> 63 else u


def _zz(v):
    return ((v << 1) ^ (v >> 63)) & M64


def _unzz(u):
    return _s64((u >> 1) ^ -(u & 1))


def _put(out, u):
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


def _get(data, i):
    r, shift = 0, 0
    while i < len(data) and shift < 70:
        b = data[i]
        i += 1
        r |= (b & 0x7F) << min(shift, 63)
        if not b & 0x80:
            return r & M64, i
        shift += 7
    raise ValueError("malformed varint")


def encode_chunk(rows):
    out, prev = bytearray(), [0, 0, 0]
    for r in rows:
        st, mul, states = 0, 1, []
        for c in OPT:
            s = 0 if r[c] is None else 1 if r[c] == 0 else 2
            states.append(s)
            st += s * mul
            mul *= 3
        out.append(st)
        _put(out, _zz(r[3]))
        _put(out, _zz(_s64(r[0] - prev[0])))
        _put(out, _zz(_s64(r[1] - prev[1])))
        prev[0], prev[1] = r[0], r[1]
        if states[0] == 2:
            _put(out, _zz(_s64(r[2] - prev[2])))
            prev[2] = r[2]
        for k in (1, 2, 3):
            if states[k] == 2:
                _put(out, _zz(r[OPT[k]]))
    return bytes(out)


def decode_chunk(data):
    rows, prev, i = [], [0, 0, 0], 0
    while i < len(data):
        st = data[i]
        i += 1
        if st >= 81:
            raise ValueError("malformed state byte")
        v = [None] * 7
        u, i = _get(data, i)
        v[3] = _unzz(u)
        u, i = _get(data, i)
        prev[0] = v[0] = _s64(prev[0] + _unzz(u))
        u, i = _get(data, i)
        prev[1] = v[1] = _s64(prev[1] + _unzz(u))
        for k, c in enumerate(OPT):
            s, st = st % 3, st // 3
            if s == 1:
                v[c] = 0
            elif s == 2:
                u, i = _get(data, i)
                if k == 0:
                    prev[2] = v[c] = _s64(prev[2] + _unzz(u))
                else:
                    v[c] = _unzz(u)
        rows.append(tuple(v))
    return rows


def event_count(con, schema="main"):
    """From the chunks' headers (a schema 2 trace: its plain events table)."""
    if not con.execute(f"SELECT count(*) FROM {schema}.sqlite_master WHERE name = 'event_chunks'"
                       ).fetchone()[0]:
        return con.execute(f"SELECT count(*) FROM {schema}.events").fetchone()[0]
    return con.execute(f"SELECT coalesce(max(id + n - 1), 0) FROM {schema}.event_chunks"
                       ).fetchone()[0]


def write_events(con, rows):
    """Append rows (7-tuples) as chunks of up to 1024, after those stored."""
    rows = list(rows)
    first = event_count(con) + 1
    run = con.execute("SELECT max(run_max) FROM event_chunks").fetchone()[0]
    for at in range(0, len(rows), CHUNK_EVENTS):
        chunk = rows[at:at + CHUNK_EVENTS]
        cid = first + at
        ts = [r[0] for r in chunk]
        run = max(ts) if run is None else max(run, max(ts))
        con.execute("INSERT INTO event_chunks(id, n, min_ts, max_ts, run_max) VALUES(?,?,?,?,?)",
                    (cid, len(chunk), min(ts), max(ts), run))
        con.execute("INSERT INTO event_chunk_data(id, data) VALUES(?,?)",
                    (cid, encode_chunk(chunk)))
        tasks = {}
        for r in chunk:
            if r[2] is not None:
                lo, hi = tasks.get(r[2], (r[0], r[0]))
                tasks[r[2]] = (min(lo, r[0]), max(hi, r[0]))
        con.executemany("INSERT INTO event_chunk_tasks(task_id, chunk_id, min_ts, max_ts)"
                        " VALUES(?,?,?,?)", [(t, cid, lo, hi) for t, (lo, hi) in tasks.items()])


def create_schema(con, sql):
    """Run a schema script whose virtual table needs a module we cannot load."""
    if VTAB not in sql:
        raise ValueError("the schema no longer declares events as expected")
    con.executescript(sql.replace(VTAB + ";", ""))
    con.execute("PRAGMA writable_schema=ON")
    con.execute("INSERT INTO sqlite_schema(type, name, tbl_name, rootpage, sql)"
                " VALUES('table', 'events', 'events', 0, ?)", (VTAB,))
    con.execute("PRAGMA writable_schema=OFF")
    con.commit()


def load_events(con):
    """Shadow `events` with a TEMP table of the decoded events (a database
    without chunks is left as it is)."""
    if con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'event_chunks'").fetchone()[0]:
        con.execute("CREATE TEMP TABLE events(ts_ns INTEGER, loop_id INTEGER, task_id INTEGER,"
                    " kind INTEGER, reason INTEGER, arg0 INTEGER, arg1 INTEGER)")
        for cid, n, data in con.execute("SELECT c.id, c.n, d.data FROM event_chunks c"
                                        " JOIN event_chunk_data d USING(id) ORDER BY c.id"
                                        ).fetchall():
            rows = decode_chunk(data)
            if len(rows) != n:
                raise ValueError(f"chunk {cid}: {len(rows)} events, its row says {n}")
            con.executemany("INSERT INTO temp.events(rowid, ts_ns, loop_id, task_id, kind, reason,"
                            " arg0, arg1) VALUES(?,?,?,?,?,?,?,?)",
                            [(cid + k,) + r for k, r in enumerate(rows)])
        # the views over events, again in TEMP: a view of main reads main.events
        for name, sql in con.execute("SELECT name, sql FROM main.sqlite_master WHERE type = 'view'"
                                     ).fetchall():
            if sql.startswith("CREATE VIEW "):
                con.execute("CREATE TEMP VIEW " + sql[len("CREATE VIEW "):])
    return con


class _Conn:
    """A connection that decodes the events at the first statement naming
    them (or a view over them), not before."""
    NAMES = re.compile(r"\b(events|events_named|timer_lateness)\b")

    def __init__(self, con):
        self._con, self._loaded = con, False

    def _need(self, sql):
        if not self._loaded and self.NAMES.search(sql):
            self._loaded = True
            load_events(self._con)

    def execute(self, sql, params=()):
        self._need(sql)
        return self._con.execute(sql, params)

    def executemany(self, sql, rows):
        self._need(sql)
        return self._con.executemany(sql, rows)

    def __getattr__(self, name):
        return getattr(self._con, name)

    def __setattr__(self, name, value):
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._con, name, value)


def connect(*args, **kwargs):
    """sqlite3.connect(...) where `events` is readable (a decoded TEMP copy,
    made when a statement first names it)."""
    return _Conn(sqlite3.connect(*args, **kwargs))


def shell_query(path, sql, params=()):
    """Rows of sql on the trace at path, run by the sqlite3 shell with the
    extension loaded (the C virtual table: for traces too big to decode
    here).  params: integers, put in place of the ?s.  Values as JSON gives
    them."""
    parts = sql.split("?")
    if len(parts) != len(params) + 1:
        raise ValueError("shell_query: one integer parameter per ?")
    sql = parts[0] + "".join(str(int(p)) + rest for p, rest in zip(params, parts[1:]))
    out = subprocess.run(["sqlite3", "-readonly", "-cmd", f".load {extension()}", "-json", path,
                          sql], check=True, capture_output=True, text=True).stdout
    return [tuple(r.values()) for r in json.loads(out)] if out.strip() else []


def event_rows(path):
    """The events of a trace file, in rowid order."""
    con = connect(path)
    try:
        return con.execute("SELECT " + ", ".join(COLS) + " FROM events ORDER BY rowid").fetchall()
    finally:
        con.close()


def extension():
    """$LOOPSCOPE_SQLITE_EXT, else BUILD/model/loopscope_events.so of the
    loopscope binary named on the command line (BUILD/viewer/loopscope), else
    of build/ at the top of the tree."""
    env = os.environ.get("LOOPSCOPE_SQLITE_EXT")
    if env:
        return env
    cands = []
    for a in sys.argv:
        for part in a.split("="):
            if part.endswith(os.path.join("viewer", "loopscope")):
                b = os.path.dirname(os.path.dirname(os.path.abspath(part)))
                cands.append(os.path.join(b, "model", "loopscope_events.so"))
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cands.append(os.path.join(top, "build", "model", "loopscope_events.so"))
    for c in cands:
        if os.path.exists(c):
            return c
    raise RuntimeError("loopscope's SQLite extension (model/loopscope_events.so) is not built")
