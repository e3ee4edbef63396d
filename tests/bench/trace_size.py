#!/usr/bin/env python3
"""trace_size.py -- bytes per event of a trace of the demo's workload.

    tests/bench/trace_size.py [--seconds N]

Runs examples/demo.sh (it builds build/ and records examples/http_server
for N seconds, default 6, under wrk -t2 -c32 plus curl clients hitting
/block, /offload and /leak; its trace is demo-out/trace.db) and prints the
trace's events, its size, bytes per event in all, and the share of each
table and index (SQLite's dbstat).  A benchmark: it prints numbers, it does
not pass or fail.  Needs root (the demo records with BPF).
"""
import argparse
import os
import sqlite3
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import lstrace  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=6)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("trace_size: the demo records with BPF: needs root")
        return 77
    env = dict(os.environ, DEMO_SECONDS=str(a.seconds))
    subprocess.run([os.path.join(ROOT, "examples", "demo.sh")], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    db = os.path.join(ROOT, "demo-out", "trace.db")
    size = os.path.getsize(db)
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    n = lstrace.event_count(con)
    meta = dict(con.execute("SELECT key, value FROM meta"))
    print(f"trace_size: examples/demo.sh, {a.seconds} s of examples/http_server "
          f"(schema {con.execute('PRAGMA user_version').fetchone()[0]})")
    print(f"events        {n:>12,}")
    print(f"file bytes    {size:>12,}")
    print(f"bytes/event   {size / max(n, 1):>12.2f}")
    print(f"(blocking episodes {meta.get('blocking_episodes', '?')}, tasks "
          f"{con.execute('SELECT count(*) FROM tasks').fetchone()[0]})")
    print()
    print(f"{'table or index':<28} {'bytes':>12} {'B/event':>8}")
    rows = con.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
                       ).fetchall()
    for name, b in rows[:12]:
        print(f"{name:<28} {b:>12,} {b / max(n, 1):>8.2f}")
    rest = sum(b for _, b in rows[12:])
    print(f"{'(the other ' + str(len(rows) - 12) + ')':<28} {rest:>12,} {rest / max(n, 1):>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
