#!/usr/bin/env python3
"""probe_cost.py -- what detached probes cost, counted instead of timed.

    tests/bench/probe_cost.py [--build DIR]

run.sh times each benchmark built with probes (detached: no tracer) against
the same benchmark built without them (bench_*_noprobes, libevl compiled
with EVL_PROBES off).  The difference sought is about 1 %, below what this
machine's timings repeat to.  This script counts instead: it runs each
pair under valgrind's cachegrind at two sizes, n1 and n2, and prints the
difference of the two runs divided by the operations added, so that the
setup (loop, tasks, stacks) cancels out:

    instructions   executed per operation (Ir)
    loads, stores  data reads and writes per operation (Dr, Dw)
    D1 misses      first-level data cache misses per operation, simulated
                   (cachegrind's model of this CPU's caches: a placement
                   effect shows here, a real cache's timing does not)

for yield among 1000 tasks and between 2 tasks (operation: one
evl_sleep(0) resumed), socketpair ping-pong (one round trip; user space
only: cachegrind does not see the kernel) and the queue handoff (one item).
The counts do not depend on the machine's load; they are the same from
one run to the next within a few instructions per thousand operations.

With --traced the probes build runs with its batch semaphore raised by
hand (bench.h), as when the recorder is attached but without BPF: the
difference is then libevl's own share of recording (the records, their
clock reads, the published phase), per operation.  One part is not
there: under valgrind clock_gettime takes the syscall, not the vDSO, so
a clock read counts only a few instructions.

It prints numbers; with --max KEY=N,... it is also a test (ctest
probes.cost): exit status 1 when the probes build executes more than N
instructions an operation over the other in a case (keys: yield, yield-2,
pingpong, queue).  The counts do not depend on timing, so neither does the
outcome; they do depend on the compiler, hence limits with some room.
Exit status 77 when valgrind is missing (Debian: apt-get install
valgrind), 1 when a benchmark fails.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

# key, name, binary stem, --series, n1, n2, operations per unit of n
CASES = [
    ("yield", "yield, 1000 tasks", "bench_yield", "yield", 20, 40, 1000),
    ("yield-2", "yield, 2 tasks", "bench_yield", "yield-2", 20, 40, 2000),
    ("pingpong", "ping-pong", "bench_pingpong", None, 5000, 10000, 1),
    ("queue", "queue handoff", "bench_queue", None, 20000, 40000, 1),
]
FIELDS = ("I", "Dr", "Dw", "D1mr", "D1mw")


def counts(cmd):
    """Run cmd under cachegrind; its totals by field."""
    p = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=yes",
                        "--cachegrind-out-file=/dev/null"] + cmd,
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"probe_cost: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    num = lambda s: int(s.replace(",", ""))
    out = {}
    m = re.search(r"I\s+refs:\s+([\d,]+)", p.stderr)
    d = re.search(r"D\s+refs:\s+[\d,]+\s+\(\s*([\d,]+) rd\s+\+\s+([\d,]+) wr\)", p.stderr)
    d1 = re.search(r"D1\s+misses:\s+[\d,]+\s+\(\s*([\d,]+) rd\s+\+\s+([\d,]+) wr\)", p.stderr)
    if not (m and d and d1):
        sys.exit(f"probe_cost: no cachegrind summary from {' '.join(cmd)}:\n{p.stderr[-2000:]}")
    out["I"] = num(m.group(1))
    out["Dr"], out["Dw"] = num(d.group(1)), num(d.group(2))
    out["D1mr"], out["D1mw"] = num(d1.group(1)), num(d1.group(2))
    return out


def per_op(binary, impl, series, n1, n2, ops, traced=False):
    args = ["--repeats", "1", "--impl", impl] + (["--traced"] if traced else [])
    if series:
        args += ["--series", series]
    a = counts([binary] + args + ["--n", str(n1)])
    b = counts([binary] + args + ["--n", str(n2)])
    return {f: (b[f] - a[f]) / ((n2 - n1) * ops) for f in FIELDS}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="the build tree (default: build)")
    ap.add_argument("--traced", action="store_true",
                    help="the probes build with its batch semaphore raised (recording)")
    ap.add_argument("--max", default="", metavar="KEY=N,...",
                    help="fail when a case's extra instructions per operation exceed N")
    o = ap.parse_args()
    keys = {c[0] for c in CASES}
    limits = {}
    for item in filter(None, o.max.split(",")):
        k, _, v = item.partition("=")
        try:
            limits[k] = float(v)
        except ValueError:
            limits[k] = None
        if k not in keys or limits[k] is None:
            ap.error(f"--max: bad item {item!r} (keys: {', '.join(sorted(keys))})")
    if not shutil.which("valgrind"):
        print("probe_cost: valgrind not found (apt-get install valgrind)", file=sys.stderr)
        return 77
    bindir = os.path.join(o.build, "tests", "bench")
    state = "traced: batch semaphore raised" if o.traced else "detached"
    print(f"probe_cost: per operation, probes compiled in and {state} (evl) against")
    print("compiled out (evl-noprobes); cachegrind, marginal between two sizes\n")
    head = f"{'benchmark':18} {'build':13}" + "".join(f" {h:>9}" for h in
                                                     ("instr", "loads", "stores", "D1 rd miss", "D1 wr miss"))
    print(head)
    print("-" * len(head))
    over = []
    for key, name, stem, series, n1, n2, ops in CASES:
        rows = []
        for impl, suffix in (("evl", ""), ("evl-noprobes", "_noprobes")):
            c = per_op(os.path.join(bindir, stem + suffix), impl, series, n1, n2, ops,
                       o.traced and not suffix)
            rows.append(c)
            print(f"{name:18} {impl:13}" + "".join(f" {c[f]:9.2f}" for f in FIELDS))
        d = {f: rows[0][f] - rows[1][f] for f in FIELDS}
        rel = 100.0 * d["I"] / rows[1]["I"] if rows[1]["I"] else 0.0
        print(f"{'':18} {'difference':13}" + "".join(f" {d[f]:+9.2f}" for f in FIELDS)
              + f"   ({rel:+.1f} % instructions)")
        if key in limits and d["I"] > limits[key]:
            over.append(f"{key}: {d['I']:+.2f} instructions an operation, limit {limits[key]:g}")
    for line in over:
        print(f"probe_cost: over the limit: {line}", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
