"""lstrace.py -- loopscope traces from Python's sqlite3, for the tests and the
benchmarks.

A trace's `events` is a virtual table over chunks of encoded events
(tracer/SCHEMA.md, model/evchunk.h), provided by loopscope's SQLite extension
model/loopscope_events.so.  Python's sqlite3 here cannot load extensions,
but the sqlite3 shell can: every event this module reads or writes goes
through the extension, run by the shell -- the one implementation of the
encoding (model/evchunk.c), never a second one in Python.

    connect(...)         sqlite3.connect(...) where `events` (a TEMP table
                         shadowing the virtual one) holds the events, rowids
                         included, decoded by the extension when a statement
                         first names them (once per state of the trace's
                         chunks in a process); writes to it are not saved
    event_rows(path)     the events of a trace, in rowid order
    write_events(con, rows[, per_chunk])   append events (tuples of the 7
                         columns) through the extension, which encodes them
    create_schema(path, sql)   run tracer/schema.sql (its CREATE VIRTUAL
                         TABLE needs the extension) on a new database
    event_count(con)     the number of events, from the chunks' headers
    extension()          the path of model/loopscope_events.so:
                         $LOOPSCOPE_SQLITE_EXT, which CMake sets for every
                         test that reads a trace (tests/*/CMakeLists.txt)
    shell(path, script)  run an SQL script in the sqlite3 shell with the
                         extension loaded
"""
import atexit
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
import urllib.parse

COLS = ("ts_ns", "loop_id", "task_id", "kind", "reason", "arg0", "arg1")
_COLS = ", ".join(COLS)
_DECL = ("(ts_ns INTEGER, loop_id INTEGER, task_id INTEGER, kind INTEGER, reason INTEGER,"
         " arg0 INTEGER, arg1 INTEGER)")


def extension():
    """$LOOPSCOPE_SQLITE_EXT (set by CMake in each test's environment), else,
    for a script run by hand, build/model/loopscope_events.so at the top of
    the tree (tests/run.sh's build)."""
    env = os.environ.get("LOOPSCOPE_SQLITE_EXT")
    if env:
        return env
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    built = os.path.join(top, "build", "model", "loopscope_events.so")
    if os.path.exists(built):
        return built
    raise RuntimeError("loopscope's SQLite extension is not found: set LOOPSCOPE_SQLITE_EXT to "
                       "BUILD/model/loopscope_events.so")


def shell(path, script):
    """Run script (SQL, and the shell's dot commands) on the database at
    path in the sqlite3 shell, the extension loaded: its stdout.  Stops at
    the first error: sqlite3.DatabaseError with the shell's message."""
    ext = extension()
    if "'" in ext:
        raise RuntimeError(f"the extension's path {ext!r} holds a quote")
    p = subprocess.run(["sqlite3", "-batch", "-bail", "-cmd", f".load '{ext}'", path],
                       input=script, capture_output=True, text=True)
    if p.returncode != 0:
        raise sqlite3.DatabaseError(f"sqlite3 shell with {ext} on {path}: {p.stderr.strip()}")
    return p.stdout


def _main_file(con):
    """The file of the main database of con."""
    for _, name, file in con.execute("PRAGMA database_list").fetchall():
        if name == "main":
            if not file:
                raise ValueError("lstrace: the database is not a file")
            return file
    raise ValueError("lstrace: no main database")


def _sql_text(s):
    return "'" + s.replace("'", "''") + "'"


_DECODED = {}       # a trace's (st_dev, st_ino, chunks' summary): its events' scratch database
_SCRATCH = []       # the directory holding them, removed at exit


def _decoded(con):
    """A scratch database whose table events holds the events of the trace
    open on con (rowids included), decoded by the extension in the sqlite3
    shell: once per state of the trace's chunks in this process."""
    path = os.path.abspath(_main_file(con))
    st = os.stat(path)
    key = (st.st_dev, st.st_ino) + tuple(con.execute(
        "SELECT count(*), coalesce(max(id + n - 1), 0), total(n), max(run_max), total(min_ts),"
        " total(max_ts) FROM event_chunks").fetchone())
    if key not in _DECODED:
        if not _SCRATCH:
            _SCRATCH.append(tempfile.mkdtemp(prefix="lstrace-"))
            atexit.register(shutil.rmtree, _SCRATCH[0], True)
        scratch = os.path.join(_SCRATCH[0], f"events-{len(_DECODED)}.db")
        trace = "file:" + urllib.parse.quote(path) + "?mode=ro"
        shell(scratch, f"PRAGMA journal_mode = OFF;\nPRAGMA synchronous = OFF;\n"
                       f"ATTACH {_sql_text(trace)} AS t;\n"
                       f"CREATE TABLE events{_DECL};\n"
                       f"INSERT INTO events(rowid, {_COLS}) SELECT rowid, {_COLS}"
                       f" FROM t.events ORDER BY rowid;\n")
        _DECODED[key] = scratch
    return _DECODED[key]


def load_events(con):
    """Shadow `events` with a TEMP table of the events, decoded by the
    extension (a database without chunks is left as it is): copied from
    the scratch database _decoded() keeps."""
    if not con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'event_chunks'"
                       ).fetchone()[0]:
        return con
    if con.in_transaction:        # ATTACH cannot run in one
        raise sqlite3.OperationalError("lstrace: events are read before any write on the"
                                       " connection, or after a commit")
    scratch = _decoded(con)
    con.execute("PRAGMA temp_store = MEMORY")
    con.execute(f"CREATE TEMP TABLE events{_DECL}")
    con.execute("ATTACH ? AS lstrace_events", (scratch,))
    try:
        con.execute(f"INSERT INTO temp.events(rowid, {_COLS})"
                    f" SELECT rowid, {_COLS} FROM lstrace_events.events")
    finally:
        con.commit()
        con.execute("DETACH lstrace_events")
    # the views over events, again in TEMP: a view of main reads main.events
    for name, sql in con.execute("SELECT name, sql FROM main.sqlite_master WHERE type = 'view'"
                                 ).fetchall():
        if sql.startswith("CREATE VIEW "):
            con.execute("CREATE TEMP VIEW " + sql[len("CREATE VIEW "):])
    return con


class _Conn:
    """A connection that has the extension decode the events at the first
    statement naming them (or a view over them), not before."""
    NAMES = re.compile(r"\b(events|events_named|timer_lateness)\b")

    def __init__(self, con):
        self._con, self._loaded = con, False

    def _need(self, sql):
        if not self._loaded and self.NAMES.search(sql):
            load_events(self._con)
            self._loaded = True

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
    """sqlite3.connect(...) where `events` is readable (a TEMP copy, made
    when a statement first names it)."""
    return _Conn(sqlite3.connect(*args, **kwargs))


def event_rows(path):
    """The events of a trace file, in rowid order."""
    con = connect(f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro", uri=True)
    try:
        return con.execute(f"SELECT {_COLS} FROM events ORDER BY rowid").fetchall()
    finally:
        con.close()


def event_count(con, schema="main"):
    """From the chunks' headers (a schema 2 trace: its plain events table)."""
    if not con.execute(f"SELECT count(*) FROM {schema}.sqlite_master WHERE name = 'event_chunks'"
                       ).fetchone()[0]:
        return con.execute(f"SELECT count(*) FROM {schema}.events").fetchone()[0]
    return con.execute(f"SELECT coalesce(max(id + n - 1), 0) FROM {schema}.event_chunks"
                       ).fetchone()[0]


def write_events(con, rows, per_chunk=None):
    """Append rows (7-tuples: integers, None where a column allows it) to
    the events of the trace open on con, after those stored, through the
    extension's INSERT (model/evchunk.c encodes them, as the recorder's).
    Chunks are as the extension cuts them (LS_CHUNK_EVENTS), or of at most
    per_chunk events (one transaction each: a chunk ends with its
    transaction).  Commits con first: the shell writes the file.  The rows
    wait in a scratch database: the trace gets only its chunks' rows."""
    con.commit()
    with tempfile.TemporaryDirectory(prefix="lstrace-") as d:
        staged = os.path.join(d, "staged.db")
        s = sqlite3.connect(staged)
        try:
            s.execute(f"CREATE TABLE events{_DECL}")
            s.executemany(f"INSERT INTO events({_COLS}) VALUES(?,?,?,?,?,?,?)", rows)
            n = s.execute("SELECT count(*) FROM events").fetchone()[0]
            s.commit()
        finally:
            s.close()
        step = per_chunk or max(n, 1)
        script = ["PRAGMA synchronous = OFF;", f"ATTACH {_sql_text(staged)} AS staged;"]
        for lo in range(1, n + 1, step):
            script.append(f"BEGIN; INSERT INTO main.events({_COLS}) SELECT {_COLS} FROM"
                          f" staged.events WHERE rowid BETWEEN {lo} AND {lo + step - 1}"
                          f" ORDER BY rowid; COMMIT;")
        shell(_main_file(con), "\n".join(script) + "\n")


def create_schema(path, sql):
    """Run a schema script (tracer/schema.sql) on the database at path in the
    sqlite3 shell, which creates the virtual table events with the
    extension, as the recorder does."""
    shell(path, sql)
