#!/usr/bin/env python3
"""make_diff_moved.py -- derive fixtures/diff_moved.sql from diff_before.sql:
the same recording as if the sleep bug (examples/blocking_server.c:107) had
been fixed by an edit that adds three lines: its blocking episodes are
removed and every line of blocking_server.c below 107 moves down by 3.  The
`diff` goldens check that the sites below the fix are matched as moved, not
reported gone and new.  No recording needed; rerun after diff_before.sql
changes.
"""
import os
import sqlite3
import subprocess
import tempfile
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lstrace  # noqa: E402  (tests/lstrace.py: events needs loopscope's SQLite extension)
import fixture_schema  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "fixtures", "diff_before.sql")
DST = os.path.join(HERE, "fixtures", "diff_moved.sql")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "moved.db")
        fixture_schema.build(SRC, db)
        con = sqlite3.connect(db)
        fixed = ("SELECT b.id FROM blocking b JOIN frames f ON f.stack_id = b.stack_id"
                 " WHERE f.function = 'route_sleep'")
        con.execute(f"DELETE FROM blocking_victims WHERE blocking_id IN ({fixed})")
        con.execute(f"DELETE FROM blocking WHERE id IN ({fixed})")
        con.execute("UPDATE frames SET line = line + 3"
                    " WHERE file LIKE '%examples/blocking_server.c' AND line > 107")
        n = con.execute("SELECT count(*) FROM blocking").fetchone()[0]
        con.execute("UPDATE meta SET value = ? WHERE key = 'blocking_episodes'", (str(n),))
        con.commit()
        user_version = con.execute("PRAGMA user_version").fetchone()[0]
        app_id = con.execute("PRAGMA application_id").fetchone()[0]
        con.close()
        dump = fixture_schema.fixture_dump(db, lstrace.event_rows(db)).decode()
        with open(DST, "w") as f:
            f.write(dump)
            f.write(f"PRAGMA user_version = {user_version};\n")
            f.write(f"PRAGMA application_id = {app_id};\n")
    print(f"fixtures/diff_moved.sql: {n} blocking episodes")


if __name__ == "__main__":
    main()
