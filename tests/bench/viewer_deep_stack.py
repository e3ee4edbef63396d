#!/usr/bin/env python3
"""viewer_deep_stack.py -- every viewer command on a trace with a 100 000-frame stack.

    viewer_deep_stack.py --build LABEL=LOOPSCOPE [--build LABEL=LOOPSCOPE ...]
                         [--shape S] [--size N] [--timeout S] [--out FILE] [--note TEXT]

Builds the deep-stack trace of tests/viewer/hostile_traces.py (build_deep:
two stacks of 100 000 frames, a chain of distinct functions and one
function recursing, and a short one; eight blocking episodes on them), or
another of its large shapes (--shape sites: 10^4 call sites, 3 episodes
each; tasks: 10^6 tasks; awaits: await chains of 10^5 frames), derives it
once, then runs each command below with each loopscope binary given (e.g.
before=/tmp/old/loopscope after=build/viewer/loopscope, and their ASan
builds) and prints a table of wall-clock seconds, ">S" for a run killed at
the timeout.  --out also writes the table there, with the machine and the
note.  The SQLite extension is $LOOPSCOPE_SQLITE_EXT, else the one beside
the first binary (BUILD/model/loopscope_events.so).
"""
import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "viewer"))

COMMANDS = [
    ["info"], ["tasks"], ["tasks", "--stacks"], ["tasks", "--stacks", "--json"],
    ["timeline"], ["timeline", "--svg", "{out}/t.svg"],
    ["blocking"], ["blocking", "--json"], ["blocking", "--by", "task"],
    ["blocking", "--by", "syscall"],
    ["graph", "--kind", "blocking", "-o", "{out}/g.svg"],
    ["graph", "--kind", "blocking", "-o", "{out}/g.dot"],
    ["graph", "--kind", "tasks", "-o", "{out}/g.svg"],
    ["graph", "--kind", "lifecycle", "-o", "{out}/g.svg"],
    ["graph", "--kind", "lifecycle", "--task", "1", "-o", "{out}/g.svg"],
    ["export", "-o", "{out}/e.pftrace"],
    ["export", "--format", "chrome-json", "-o", "{out}/e.json"],
    ["lint"], ["lint", "--json"],
    ["sql", "SELECT count(*) FROM frames"],
    ["diff", "{db}"], ["diff", "{db}", "--json"], ["diff", "{db}", "--svg", "{out}/d.svg"],
]


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", action="append", required=True, help="LABEL=path of loopscope")
    ap.add_argument("--shape", default="deep", help="deep (default), sites, tasks, awaits: "
                    "hostile_traces.SHAPES")
    ap.add_argument("--size", type=int, help="the shape's size (deep, awaits: frames; sites: "
                    "stacks; tasks: tasks); default the shape's own")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--out")
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    builds = [b.split("=", 1) for b in a.build]
    if not os.environ.get("LOOPSCOPE_SQLITE_EXT"):
        os.environ["LOOPSCOPE_SQLITE_EXT"] = os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(builds[0][1]))), "model",
            "loopscope_events.so")
    import hostile_traces  # noqa: E402  (needs the extension's path first)
    tmp = tempfile.mkdtemp(prefix="lsdeep-")
    env = {**os.environ, "COLUMNS": "100", "ASAN_OPTIONS": "detect_leaks=0"}
    try:
        db = os.path.join(tmp, "deep.db")
        fixtures = os.path.join(tmp, "fx")      # Db copies the lookup tables from lifecycle.db
        os.makedirs(fixtures)
        src = os.path.join(HERE, "..", "viewer", "fixtures", "lifecycle.sql")
        subprocess.run(["sqlite3", "-bail", "-cmd", f".load {os.environ['LOOPSCOPE_SQLITE_EXT']}",
                        os.path.join(fixtures, "lifecycle.db")], stdin=open(src, "rb"),
                       check=True)
        t = hostile_traces.Db(db, fixtures)
        hostile_traces.SHAPES[a.shape](t, *([a.size] if a.size else []))
        t.finish(forged=False)
        t0 = time.monotonic()
        subprocess.run([builds[0][1], "sql", db, "SELECT 1"], check=True, env=env,
                       capture_output=True)      # derive it once, outside the timings
        derive = time.monotonic() - t0
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        rows = []
        for cmd in COMMANDS:
            shown = " ".join(c.replace("{out}/", "").replace("{db}", "SELF") for c in cmd)
            row = [shown]
            for label, binary in builds:
                argv = [binary, cmd[0], db] + [c.replace("{out}", out).replace("{db}", db)
                                               for c in cmd[1:]]
                t0 = time.monotonic()
                try:
                    p = subprocess.run(argv, capture_output=True, timeout=a.timeout, env=env)
                    dt = time.monotonic() - t0
                    cell = f"{dt:.2f}" if p.returncode == 0 else f"{dt:.2f} (exit {p.returncode})"
                except subprocess.TimeoutExpired:
                    cell = f">{a.timeout:.0f} (killed)"
                row.append(cell)
                print(f"{label:>14} {cell:>14}  {shown}", file=sys.stderr, flush=True)
            rows.append(row)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    head = ["command (seconds, wall clock)"] + [label for label, _ in builds]
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                       enumerate(zip(r, widths))).rstrip() for r in [head] + rows]
    table = "\n".join(lines) + "\n"
    print(table, end="")
    if a.out:
        with open(a.out, "w") as f:
            f.write(f"# tests/bench/viewer_deep_stack.py --shape {a.shape}"
                    f"{f' --size {a.size}' if a.size else ''} --timeout {a.timeout:.0f}\n")
            f.write(f"# trace: hostile_traces.SHAPES[{a.shape!r}] (build_{a.shape}), size "
                    f"{a.size or 'its default'}; derived by {builds[0][0]} in {derive:.1f} s "
                    f"before the timings\n")
            f.write(f"# machine: {os.cpu_count()} vCPU {cpu_name()}, {platform.platform()}\n")
            for label, binary in builds:
                f.write(f"# {label}: {binary}\n")
            for line in a.note.splitlines():
                f.write(f"# {line}\n")
            f.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
