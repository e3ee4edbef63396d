#!/usr/bin/env python3
"""fixture_schema.py -- the viewer's fixture traces follow the current schema.

    fixture_schema.py --check  [--fixtures DIR]   fail if a fixture differs
    fixture_schema.py --refresh [--fixtures DIR]  rewrite the dumps

Every fixture (tests/viewer/fixtures/*.sql, a trace as an SQL dump) must be
a trace the current recorder could have written: the same tables, columns
and views as a database made from tracer/schema.sql and model/derived.sql,
and the same user_version and application_id.  --check (a ctest) compares
each fixture's schema with that one, table by table; --refresh rebuilds each
dump from the current schema, copying the recorded rows of every base table
into it (columns matched by name; the derived tables are left empty, so the
viewer derives them on first read as it does for an old or cut-short trace
-- except the generic mode's iteration_hist, which the recorder's BPF side
wrote).  After --refresh, rerun the golden tests and review any diff.
"""
import argparse
import glob
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lstrace  # noqa: E402  (tests/lstrace.py: events needs loopscope's SQLite extension)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
SCHEMA = os.path.join(ROOT, "tracer", "schema.sql")
DERIVED = os.path.join(ROOT, "model", "derived.sql")
# Filled by the replay (model/derived.sql); iteration_hist only for libevl traces.
DERIVED_TABLES = {"task_stats", "transitions", "transition_hist"}


def reference():
    tmp = tempfile.NamedTemporaryFile(suffix=".db", delete=False)
    tmp.close()
    with open(SCHEMA) as f:
        lstrace.create_schema(tmp.name, f.read())
    db = sqlite3.connect(tmp.name)
    with open(DERIVED) as f:
        db.executescript(f.read())
    db.close()
    db = sqlite3.connect(tmp.name)      # with the schema as written
    os.unlink(tmp.name)
    return db


def build(sql_path, db_path):
    """The database of a dump, made as the tests make it: by the sqlite3 shell."""
    with open(sql_path, "rb") as f:
        subprocess.run(["sqlite3", "-cmd", f".load {lstrace.extension()}", db_path], stdin=f,
                       check=True)


# The sqlite3 shell dumps a virtual table as a row written into
# sqlite_schema, which a script cannot use before the database is reopened;
# a fixture declares it instead, and holds its events as rows of `events`
# (readable, and encoded into chunks when the fixture is built), not as the
# chunk tables' blobs.
VTAB_ROW = (b"PRAGMA writable_schema=ON;\n"
            b"INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)VALUES('table','events',"
            b"'events',0,'CREATE VIRTUAL TABLE events USING loopscope_events');\n")
CHUNK_ROWS = (b"INSERT INTO event_chunks ", b"INSERT INTO event_chunk_data ",
              b"INSERT INTO event_chunk_tasks ")


def fixture_dump(path, events):
    """The dump of the trace at path, its events given as rows (lstrace.event_rows)."""
    dump = subprocess.run(["sqlite3", "-cmd", f".load {lstrace.extension()}", path, ".dump"],
                          check=True, capture_output=True).stdout
    if VTAB_ROW not in dump:
        sys.exit("fixture_schema.py: the shell's dump of events changed form")
    dump = dump.replace(VTAB_ROW, b"CREATE VIRTUAL TABLE events USING loopscope_events;\n")
    dump = dump.replace(b"PRAGMA writable_schema=OFF;\n", b"")
    lines = [ln for ln in dump.split(b"\n") if not ln.startswith(CHUNK_ROWS)]
    rows = [b"INSERT INTO events VALUES(" +
            b",".join(b"NULL" if v is None else str(int(v)).encode() for v in r) + b");"
            for r in events]
    end = lines.index(b"COMMIT;")
    return b"\n".join(lines[:end] + rows + lines[end:])


def load(path):
    tmp = tempfile.NamedTemporaryFile(suffix=".db", delete=False)
    tmp.close()
    os.unlink(tmp.name)
    build(path, tmp.name)
    db = sqlite3.connect(tmp.name)
    os.unlink(tmp.name)                 # open: the file lives until closed
    db.text_factory = bytes             # fixtures hold invalid UTF-8 on purpose
    return db


def txt(v):
    return v.decode() if isinstance(v, bytes) else v


def shape(db):
    """{name: (type, [(column, declared type, notnull, pk)])} of tables and views."""
    out = {}
    for name, typ in db.execute("SELECT name, type FROM sqlite_master WHERE type IN "
                                "('table', 'view') AND name NOT LIKE 'sqlite_%'"):
        sql = txt(db.execute("SELECT sql FROM sqlite_master WHERE name = ?", (txt(name),)).fetchone()[0])
        if txt(typ) == "view" or sql.startswith("CREATE VIRTUAL TABLE"):
            # they need the module of events, which is not loaded here
            out[txt(name)] = (txt(typ), " ".join(sql.split()))
            continue
        cols = [(txt(r[1]), txt(r[2]).upper(), r[3], r[5])
                for r in db.execute(f'PRAGMA table_info("{txt(name)}")')]
        out[txt(name)] = (txt(typ), cols)
    return out


def pragmas(db):
    return tuple(db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("user_version", "application_id"))


def check(paths):
    ref = reference()
    want, want_p = shape(ref), pragmas(ref)
    bad = 0
    for p in paths:
        db = load(p)
        got, got_p = shape(db), pragmas(db)
        name = os.path.basename(p)
        problems = []
        if got_p != want_p:
            problems.append(f"user_version/application_id {got_p}, schema says {want_p}")
        for t in sorted(set(want) - set(got)):
            problems.append(f"lacks {want[t][0]} {t}")
        for t in sorted(set(got) - set(want)):
            problems.append(f"has {got[t][0]} {t}, which the schema does not")
        for t in sorted(set(want) & set(got)):
            if want[t] != got[t]:
                problems.append(f"{t} differs: {got[t]} vs the schema's {want[t]}")
        for msg in problems:
            print(f"{name}: {msg}")
        bad += bool(problems)
    print(f"{len(paths) - bad} of {len(paths)} fixtures follow tracer/schema.sql + model/derived.sql")
    return 1 if bad else 0


def refresh(paths):
    for p in paths:
        with tempfile.TemporaryDirectory() as tmp:
            oldpath, path = os.path.join(tmp, "old.db"), os.path.join(tmp, "t.db")
            build(p, oldpath)
            events = lstrace.event_rows(oldpath)
            with open(SCHEMA) as f:
                lstrace.create_schema(path, f.read())
            new = sqlite3.connect(path)
            with open(DERIVED) as f:
                new.executescript(f.read())
            new.execute("ATTACH ? AS old", (oldpath,))
            generic = new.execute("SELECT count(*) FROM old.meta WHERE key = 'mode'"
                                  " AND value = 'generic'").fetchone()[0] > 0
            tables = [r[0] for r in new.execute("SELECT name FROM main.sqlite_master"
                                                " WHERE type = 'table'")]
            have = {r[0] for r in new.execute("SELECT name FROM old.sqlite_master"
                                              " WHERE type = 'table'")}
            for t in tables:
                if (t not in have or t in DERIVED_TABLES or (t == "iteration_hist" and not generic)
                        or t == "events" or t.startswith("event_chunk")):
                    continue
                cols = [r[1] for r in new.execute(f'PRAGMA main.table_info("{t}")')]
                oldcols = {r[1] for r in new.execute(f'PRAGMA old.table_info("{t}")')}
                cols = ", ".join(c for c in cols if c in oldcols)
                # SQL copies values with their types and bytes as they are
                new.execute(f'DELETE FROM main."{t}"')
                new.execute(f'INSERT INTO main."{t}"({cols}) SELECT {cols} FROM old."{t}"')
            new.execute("DELETE FROM main.meta WHERE key IN ('model_version', 'derived_end_ns')")
            new.commit()
            new.execute("DETACH old")
            uv, app = pragmas(new)
            new.close()
            dump = fixture_dump(path, events)
        with open(p, "wb") as f:
            f.write(dump)
            f.write(f"PRAGMA user_version = {uv};\nPRAGMA application_id = {app};\n".encode())
        print(f"refreshed {os.path.basename(p)}")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=os.path.join(HERE, "fixtures"))
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true")
    g.add_argument("--refresh", action="store_true")
    a = ap.parse_args()
    paths = sorted(glob.glob(os.path.join(a.fixtures, "*.sql")))
    if not paths:
        sys.exit(f"fixture_schema.py: no fixtures in {a.fixtures}")
    sys.exit(check(paths) if a.check else refresh(paths))


if __name__ == "__main__":
    main()
