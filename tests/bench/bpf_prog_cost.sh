#!/usr/bin/env bash
# tests/bench/bpf_prog_cost.sh [BUILD] [SECONDS]
#
# What the recorder's BPF programs cost, per program: examples/http_server
# under `wrk -t1 -c8` (default: build/, 5 s), recorded by pid with
# kernel.bpf_stats_enabled=1, then each loaded program's run count and run
# time from `bpftool prog show` (the kernel's own accounting: the time
# inside the program, not the uprobe trap or the tracepoint's dispatch),
# and its share of the wrk run's wall time.  Which programs run on the
# server's thread: on_batch (the batch probe, in the server), on_switch
# (every context switch of the machine; it leaves at once unless one side
# is the target), on_cpu_sample (a timer on each CPU).  A benchmark:
# prints numbers.  Root, wrk, bpftool; exit status 77 without them.
set -euo pipefail
build=$(realpath "${1:-build}")
secs=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/http_record.sh"
hr_require bpf_prog_cost wrk bpftool
was=$(sysctl -n kernel.bpf_stats_enabled)
hr_on_exit() { sysctl -q kernel.bpf_stats_enabled="$was"; }
hr_start_server "$build"
sysctl -q kernel.bpf_stats_enabled=1
hr_start_recorder "$build"
sleep 1
bpftool prog show -j >"$tmp/before.json"
echo "bpf_prog_cost: $build/examples/http_server under wrk -t1 -c8 -d${secs}s, recorded by pid"
wrk -t1 -c8 -d"${secs}s" "$url" | grep -E "Requests/sec"
bpftool prog show -j >"$tmp/after.json"
hr_stop_recorder
python3 - "$tmp/before.json" "$tmp/after.json" "$secs" <<'PY'
import json, sys
before = {p["id"]: p for p in json.load(open(sys.argv[1]))}
secs = float(sys.argv[3])
print(f"{'program':20} {'runs':>10} {'ns/run':>8} {'ms/s':>7}  (during the wrk run)")
for p in json.load(open(sys.argv[2])):
    b = before.get(p["id"])
    if b is None or "run_cnt" not in p:
        continue
    n = p["run_cnt"] - b.get("run_cnt", 0)
    t = p["run_time_ns"] - b.get("run_time_ns", 0)
    if n:
        print(f"{p.get('name', '?'):20} {n:10d} {t / n:8.0f} {t / 1e6 / secs:7.2f}")
PY
