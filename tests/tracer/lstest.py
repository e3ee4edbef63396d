"""lstest.py -- what the recorder's test scripts share: the failure type a
case raises, the two assertions, reading a trace (read-only, through
tests/lstrace.py, which gives `events` without loopscope's extension), and
running one case from the command line."""
import argparse
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


def parse_args(cases, paths):
    """`SCRIPT CASE|--list [--PATH P ...]`: the arguments, each of `paths`
    (option names, "sem_read" for --sem-read) made absolute."""
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(cases) + ["--list"])
    for p in paths:
        ap.add_argument("--" + p.replace("_", "-"))
    a = ap.parse_args()
    for k in paths:
        if getattr(a, k):
            setattr(a, k, os.path.abspath(getattr(a, k)))
    return a


def run_case(cases, a, cleanup, root_why="recording needs root (CAP_BPF, CAP_PERFMON)"):
    """Run case a.case (or list the cases): the exit status, 0 when it
    passed, 1 on Fail, 77 when not root; cleanup() runs after the case
    whatever happens."""
    if a.case == "--list":
        print("\n".join(sorted(cases)))
        return 0
    if os.geteuid() != 0:
        print(f"skip: {root_why}")
        return 77
    try:
        cases[a.case]()
    except Fail as e:
        print(f"FAIL {a.case}: {e}")
        return 1
    finally:
        cleanup()
    print(f"ok {a.case}")
    return 0
