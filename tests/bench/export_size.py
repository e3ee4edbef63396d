#!/usr/bin/env python3
"""export_size.py -- how big `loopscope export` makes a trace, per format.

    tests/bench/export_size.py --build DIR --trace FILE [--before-build DIR]

Exports FILE (a copy of it: the viewer may derive tables into it) as
Perfetto protobuf (the default format) and as Chrome JSON (`--format
chrome-json`) with the build's loopscope, and with --before-build an older
loopscope's JSON (its only format) too, into a temporary directory, and
prints each file's size and its ratio to the JSON.  A benchmark: it prints
numbers, it does not pass or fail.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile


def export(binary, db, out, *fmt):
    subprocess.run([binary, "export", db, *fmt, "-o", out], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return os.path.getsize(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--before-build")
    ap.add_argument("--trace", required=True)
    a = ap.parse_args()
    lsbin = os.path.join(a.build, "viewer", "loopscope")
    with tempfile.TemporaryDirectory(prefix="lsexport-") as tmp:
        db = os.path.join(tmp, "t.db")
        shutil.copy(a.trace, db)
        nev = subprocess.run(["sqlite3", db, "SELECT coalesce(max(id + n - 1), 0) FROM event_chunks"],
                             check=True,
                             capture_output=True, text=True).stdout.strip()
        print(f"trace: {a.trace}, {int(nev):,} events, {os.path.getsize(db) / 2**20:.0f} MiB")
        rows = []
        if a.before_build:
            old = os.path.join(tmp, "before.json")
            rows.append(("before: export (JSON)",
                         export(os.path.join(a.before_build, "viewer", "loopscope"), db, old)))
            os.unlink(old)
        js = os.path.join(tmp, "after.json")
        rows.append(("after: export --format chrome-json", export(lsbin, db, js, "--format", "chrome-json")))
        os.unlink(js)
        pb = os.path.join(tmp, "after.pftrace")
        rows.append(("after: export (perfetto protobuf)", export(lsbin, db, pb)))
        ref = rows[0][1]
        print(f"{'output':40} {'bytes':>14} {'MB':>9} {'x first row':>12}")
        for name, size in rows:
            print(f"{name:40} {size:14,} {size / 1e6:9.1f} {size / ref:12.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
