#!/usr/bin/env python3
"""test_locked.py -- a viewer command waits for a lock another process holds
on the trace for a moment, instead of failing with "database is locked"
(several viewers, or a viewer and a sqlite3 shell, read one file at once).

    test_locked.py --loopscope BIN --fixtures DIR

A copy of DIR/blocking.db is locked EXCLUSIVE by this script; `loopscope
info` on it starts, the lock is released 0.5 s later, and the command must
succeed with the same output as on the unlocked file.
"""
import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loopscope", required=True)
    ap.add_argument("--fixtures", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "trace.db")
        shutil.copy(os.path.join(a.fixtures, "blocking.db"), db)
        want = subprocess.run([a.loopscope, "info", db], capture_output=True, text=True)
        if want.returncode != 0:
            print(f"FAIL: info on the unlocked copy exited {want.returncode}: {want.stderr}")
            return 1
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("BEGIN EXCLUSIVE")
        p = subprocess.Popen([a.loopscope, "info", db], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        if p.poll() is not None:
            print(f"FAIL: info did not wait for the lock: exit {p.returncode}, "
                  f"{p.stderr.read().strip()!r}")
            return 1
        con.execute("COMMIT")
        con.close()
        out, err = p.communicate(timeout=30)
        if p.returncode != 0 or out != want.stdout:
            print(f"FAIL: info once the lock went: exit {p.returncode}, stderr {err.strip()!r}")
            return 1
    print("ok: info waited for the lock and then read the trace")
    return 0


if __name__ == "__main__":
    sys.exit(main())
