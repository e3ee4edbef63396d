#!/usr/bin/env bash
# tests/bench/bpf_prog_cost.sh [BUILD] [SECONDS] [CONNECTIONS]
#
# What the recorder's BPF programs cost, per program: examples/http_server
# under `wrk -t1 -cCONNECTIONS` (default: build/, 5 s, 8), recorded by pid with
# kernel.bpf_stats_enabled=1, then each loaded program's run count and run
# time from `bpftool prog show` (the kernel's own accounting: the time
# inside the program, not the uprobe trap or the tracepoint's dispatch),
# and its share of the wrk run's wall time.  Which programs run on the
# server's thread: on_batch (the batch probe, in the server), on_switch
# (every context switch of the machine; it leaves at once unless one side
# is the target), on_cpu_sample (a timer on each CPU).  Then, over the
# same run, the CPU time of the server and of the recorder (all threads,
# /proc/PID/task/*/schedstat, in ns), the recorder's sleeps (voluntary
# context switches of its threads: one per wakeup) and the machine's
# steal.  A benchmark: prints numbers.  Root, wrk, bpftool; exit status
# 77 without them.
set -euo pipefail
build=$(realpath "${1:-build}")
secs=${2:-5}
conns=${3:-8}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/http_record.sh"
hr_require bpf_prog_cost wrk bpftool
was=$(sysctl -n kernel.bpf_stats_enabled)
hr_on_exit() { sysctl -q kernel.bpf_stats_enabled="$was"; }
hr_start_server "$build"
sysctl -q kernel.bpf_stats_enabled=1
hr_start_recorder "$build"
sleep 1
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{n += $1} END {printf "%.0f", n}'; }
sleeps() { cat /proc/"$1"/task/*/status | awk '/^voluntary_ctxt_switches/ {n += $2} END {print n}'; }
bpftool prog show -j >"$tmp/before.json"
read -r sc0 rc0 rs0 < <(echo "$(cpu_ns "$server") $(cpu_ns "$rec") $(sleeps "$rec")")
read -r st0 tt0 < <(hr_steal)
echo "bpf_prog_cost: $build/examples/http_server under wrk -t1 -c$conns -d${secs}s, recorded by pid"
wrk -t1 -c"$conns" -d"${secs}s" "$url" | grep -E "Requests/sec"
read -r st1 tt1 < <(hr_steal)
read -r sc1 rc1 rs1 < <(echo "$(cpu_ns "$server") $(cpu_ns "$rec") $(sleeps "$rec")")
bpftool prog show -j >"$tmp/after.json"
awk -v s="$secs" -v sc=$((sc1 - sc0)) -v rc=$((rc1 - rc0)) -v rs=$((rs1 - rs0)) \
    -v st=$((st1 - st0)) -v tt=$((tt1 - tt0)) 'BEGIN {
  printf "server cpu %.0f ms/s, recorder cpu %.1f ms/s, recorder wakeups %.0f/s, steal %.1f %%\n",
         sc / 1e6 / s, rc / 1e6 / s, rs / s, (tt > 0 ? st * 100 / tt : 0) }'
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
