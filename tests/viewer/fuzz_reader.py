#!/usr/bin/env python3
"""fuzz_reader.py -- the viewer on mutated trace databases never crashes.

    fuzz_reader.py --loopscope BIN --fixtures DIR [--seed S] [--count N]

Takes the fixture databases, damages copies of them (random bytes
overwritten, pages zeroed, the file cut short, header fields changed) with
a fixed seed, and runs every read command on each.  Each run must end with
exit status 0, 1 or 2 — never a signal, a sanitizer report or a hang — and
a failure must be reported as one "error: ..." line on stderr.  Every
fixture is mutated in turn, the generic loop mode's (loop_windows,
iteration_hist) too.
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile

COMMANDS = [
    ["info"],
    ["info", "--json"],
    ["tasks"],
    ["tasks", "--sort", "busy"],
    ["blocking"],
    ["blocking", "--by", "task"],
    ["timeline"],
    ["lint"],
    ["graph", "--kind", "tasks", "-o", "{out}.dot"],
    ["graph", "--kind", "lifecycle", "-o", "{out}.dot"],
    ["graph", "--kind", "blocking", "-o", "{out}.dot"],
    ["export", "-o", "{out}.pftrace"],
    ["export", "--format", "chrome-json", "-o", "{out}.json"],
    ["sql", "SELECT count(*) FROM events"],
    # the generic loop mode's tables (fixtures generic*.db; absent from older ones)
    ["timeline", "--svg", "{out}.svg"],
    ["sql", "SELECT * FROM loop_windows; SELECT * FROM iteration_hist"],
]


def mutate(data, rng):
    b = bytearray(data)
    how = rng.choice(["bytes", "page", "cut", "header"])
    page = 4096
    if how == "bytes":
        for _ in range(rng.randint(1, 64)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif how == "page":
        p = rng.randrange(max(1, len(b) // page))
        b[p * page:(p + 1) * page] = bytes(page)
    elif how == "cut":
        b = b[:rng.randrange(1, len(b))]
    else:                                   # the 100-byte SQLite header
        i = rng.randrange(16, 100)
        b[i] = rng.randrange(256)
    return bytes(b), how


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loopscope", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=40)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    dbs = sorted(os.path.join(a.fixtures, f) for f in os.listdir(a.fixtures) if f.endswith(".db"))
    tmp = tempfile.mkdtemp(prefix="lsfuzz-")
    failures = 0
    runs = 0
    try:
        for i in range(a.count):
            src = dbs[i % len(dbs)]
            data, how = mutate(open(src, "rb").read(), rng)
            path = os.path.join(tmp, f"m{i}.db")
            open(path, "wb").write(data)
            for cmd in COMMANDS:
                argv = [a.loopscope, cmd[0], path,
                        *(c.replace("{out}", os.path.join(tmp, "out")) for c in cmd[1:])]
                try:
                    p = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                                       errors="replace")
                except subprocess.TimeoutExpired:
                    print(f"FAIL {os.path.basename(src)} #{i} ({how}): {' '.join(cmd)} hung")
                    failures += 1
                    continue
                runs += 1
                err = [l for l in p.stderr.splitlines()    # notes: viewer/complete.c
                       if l.strip() and not l.startswith("note: ")]
                bad = None
                if p.returncode not in (0, 1, 2):
                    bad = f"exit status {p.returncode}"
                elif "Sanitizer" in p.stderr or "runtime error" in p.stderr:
                    bad = "sanitizer report"
                elif p.returncode == 1 and (len(err) != 1 or not err[0].startswith("error: ")):
                    bad = f"expected one 'error:' line, got {err[:3]}"
                if bad:
                    failures += 1
                    print(f"FAIL {os.path.basename(src)} #{i} ({how}): {' '.join(cmd)}: {bad}")
                    keep = os.path.join(tempfile.gettempdir(), f"lsfuzz-fail-{i}.db")
                    shutil.copy(path, keep)
                    print(f"     kept the input as {keep}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{runs} runs on {a.count} mutated databases, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
