#!/usr/bin/env bash
# tests/bench/recorder_bursts.sh [BUILD] [SECONDS]
#
# How long the recorder runs each time it gets a CPU, while it records
# examples/http_server under `wrk -t1 -c8` (default: build/, 5 s): a
# bpftrace histogram of the recorder's on-CPU stretches (sched_switch in
# to out, in microseconds), their count and sum, next to wrk's requests/s
# and latency percentiles.  The stretches are what a neighbour on a
# 2-CPU machine feels (results/burst_latency.txt: a server's p99 follows
# the longest bursts of CPU beside it).  A benchmark: prints numbers.
# Root, wrk, bpftrace; exit status 77 without them.
set -euo pipefail
build=$(realpath "${1:-build}")
secs=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/http_record.sh"
hr_require recorder_bursts wrk bpftrace
hr_start_server "$build"
hr_start_recorder "$build"
cat >"$tmp/bursts.bt" <<'BT'
tracepoint:sched:sched_switch /args->next_pid == $1/ { @in[cpu] = nsecs; }
tracepoint:sched:sched_switch /args->prev_pid == $1 && @in[cpu]/ {
  @stretch_us = hist((nsecs - @in[cpu]) / 1000);
  @total_us = sum((nsecs - @in[cpu]) / 1000);
  @stretches = count();
  delete(@in[cpu]);
}
END { clear(@in); }
BT
BPFTRACE_MAX_MAP_KEYS=64 bpftrace "$tmp/bursts.bt" "$rec" >"$tmp/bt.out" 2>&1 &
bt=$!
hr_pids+=($bt)
sleep 2                                               # bpftrace attaches
echo "recorder_bursts: $build/examples/http_server under wrk -t1 -c8 -d${secs}s --latency, recorded by pid"
wrk -t1 -c8 -d"${secs}s" --latency "$url" | grep -E "Requests/sec|^ +(50|90|99)%"
kill -INT "$bt"; wait "$bt" || true
hr_stop_recorder
grep -v '^Attaching\|RLIMIT_MEMLOCK' "$tmp/bt.out" | sed '/^$/d'
