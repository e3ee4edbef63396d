#!/usr/bin/env python3
"""table.py -- turn the RESULT lines of the benchmarks into run.sh's table.

Reads `RESULT <bench> <impl> <unit> best=<x> median=<y> repeats=<r>` lines
(bench.h) on stdin.  Several lines of the same bench and impl (the probes
series, one process per measurement) are merged, each line's median being
one sample.  Ratios are libevl / peer on the best values, with the ratio of
medians in parentheses.  Targets are informational: nothing fails on them.
"""
import argparse
import statistics
import sys

# bench, peers, target: (kind, peer or None, op, value, text)
#   kind "abs": libevl's best against value; "ratio": libevl/peer;
#   "slowdown": percent by which libevl is slower than peer (rates).
ROWS = [
    ("switch", ["swapcontext"], ("abs", None, "<=", 10, "<= 10 ns")),
    ("spawn", ["python-asyncio"], ("abs", None, "<=", 80, "<= 80 ns")),
    ("spawn-warm", [None], ("abs", None, "<=", 80, "<= 80 ns")),
    ("yield", ["python-asyncio"], ("abs", None, "<=", 40, "<= 40 ns")),
    ("yield-2", ["python-asyncio"], None),
    ("timers", ["libev", "libuv", "evl-vclock"], ("ratio", "libev", "<=", 1.2, "<= 1.2x libev")),
    ("timers-ns", ["libev"], ("ratio", "libev", "<=", 1.2, "<= 1.2x libev")),
    ("timers-sparse", ["libev", "libuv"], ("ratio", "libev", "<=", 1.2, "<= 1.2x libev")),
    ("pingpong", ["epoll", "libuv", "libev", "libuv-poll", "python-asyncio"], None),
    ("queue", [None], None),
    ("probes", ["evl-noprobes"], ("slowdown", "evl-noprobes", "<=", 1.0, "<= 1% slower")),
    ("probes-yield", ["evl-noprobes"], ("slowdown", "evl-noprobes", "<=", 1.0, "<= 1% slower")),
    ("probes-queue", ["evl-noprobes"], ("slowdown", "evl-noprobes", "<=", 1.0, "<= 1% slower")),
]
# Extra targets on specific peers of a row.
PEER_TARGETS = {
    ("pingpong", "epoll"): (">=", 0.95, ">= 0.95x epoll"),
    ("pingpong", "libuv"): (">=", 1.0, ">= 1x libuv"),
}
DESC = {
    "switch": "context switch",
    "spawn": "spawn+run 1e6 tasks",
    "spawn-warm": "same, loop reused",
    "yield": "sleep(0), 1000 tasks",
    "yield-2": "sleep(0), 2 tasks",
    "timers": "1e6 timers, ms (CPU)",
    "timers-ns": "1e6 timers, ns (CPU)",
    "timers-sparse": "1e4 timers, ns (CPU)",
    "pingpong": "socketpair ping-pong",
    "queue": "queue handoff (max 1)",
    "probes": "probes: ping-pong",
    "probes-yield": "probes: yield, 1000",
    "probes-queue": "probes: queue",
}


def fmt(v):
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def load(lines):
    series = {}  # (bench, impl) -> {"unit", "best", "median", "samples"}
    for line in lines:
        f = line.split()
        if len(f) < 6 or f[0] != "RESULT":
            continue
        kv = dict(x.split("=", 1) for x in f[4:] if "=" in x)
        key = (f[1], f[2])
        s = series.setdefault(key, {"unit": f[3], "lines": []})
        s["lines"].append((float(kv["best"]), float(kv["median"])))
    for s in series.values():
        rate = s["unit"].endswith("/s")
        if len(s["lines"]) == 1:
            s["best"], s["median"] = s["lines"][0]
        else:
            meds = [m for _, m in s["lines"]]
            s["best"] = max(meds) if rate else min(meds)
            s["median"] = statistics.median(meds)
        s["rate"] = rate
        s["n"] = len(s["lines"])
    return series


def check(op, value, limit):
    if value is None:
        return "n/a"
    ok = value <= limit if op == "<=" else value >= limit
    return "yes" if ok else "NO"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probes", default="?", help="EVL_PROBES of the build")
    a = ap.parse_args()
    series = load(sys.stdin)

    head = ["benchmark", "unit", "libevl best (median)", "peer",
            "peer best (median)", "ratio evl/peer", "target", "met"]
    rows = []
    for bench, peers, target in ROWS:
        evl = series.get((bench, "evl"))
        evl_txt = f"{fmt(evl['best'])} ({fmt(evl['median'])})" if evl else "-"
        unit = evl["unit"] if evl else next(
            (series[(bench, p)]["unit"] for p in peers if (bench, p) in series), "")
        first = True
        for p in peers:
            peer = series.get((bench, p)) if p else None
            ratio_txt, tgt_txt, met = "-", "", ""
            r_best = None
            if evl and peer:
                r_best = evl["best"] / peer["best"]
                r_med = evl["median"] / peer["median"]
                ratio_txt = f"{r_best:.3g}x ({r_med:.3g}x)"
            if target and target[0] == "slowdown" and target[1] == p:
                slow = None
                if evl and peer:
                    slow = (peer["best"] / evl["best"] - 1) * 100 if evl["rate"] \
                        else (evl["best"] / peer["best"] - 1) * 100
                    slow_med = (peer["median"] / evl["median"] - 1) * 100 if evl["rate"] \
                        else (evl["median"] / peer["median"] - 1) * 100
                    ratio_txt = f"{slow:+.2f}% ({slow_med:+.2f}%)"
                tgt_txt, met = target[4], check(target[2], slow, target[3])
                if a.probes not in ("ON", "1", "?"):
                    tgt_txt += f" [EVL_PROBES={a.probes}: same code]"
            elif target and target[0] == "ratio" and target[1] == p:
                tgt_txt, met = target[4], check(target[2], r_best, target[3])
            elif (bench, p) in PEER_TARGETS:
                op, lim, txt = PEER_TARGETS[(bench, p)]
                tgt_txt, met = txt, check(op, r_best, lim)
            elif target and target[0] == "abs" and first:
                tgt_txt = target[4]
                met = check(target[2], evl["best"] if evl else None, target[3])
            peer_txt = f"{fmt(peer['best'])} ({fmt(peer['median'])})" if peer else "-"
            rows.append([DESC.get(bench, bench) if first else "",
                         unit if first else "", evl_txt if first else "",
                         p or "-", peer_txt, ratio_txt, tgt_txt, met])
            first = False

    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    line = lambda r: " | ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
    print(line(head))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(line(r))
    print()
    print("best = min over repeats (max for rt/s), median in parentheses; ratio =")
    print("libevl / peer: below 1 is better for times, above 1 for rt/s.")
    print("Targets are informational; nothing fails on them.")
    missing = [k for k in series if k[1] != "evl" and not any(
        k[0] == b and k[1] in ps for b, ps, _ in ROWS)]
    for k in missing:
        print(f"note: unlisted result {k[0]} {k[1]}", file=sys.stderr)


if __name__ == "__main__":
    main()
