"""lstest.py -- what the recorder's test scripts share: the failure type a
case raises, the two assertions, and reading a trace (read-only, through
tests/lstrace.py, which gives `events` without loopscope's extension)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lstrace  # noqa: E402


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def eq(got, want, what):
    if got != want:
        raise Fail(f"{what}: expected {want!r}, got {got!r}")


def query(db, sql, *params):
    con = lstrace.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def meta(db):
    return dict(query(db, "SELECT key, value FROM meta"))
