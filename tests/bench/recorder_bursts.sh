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
[ "$(id -u)" -eq 0 ] || { echo "recorder_bursts: needs root" >&2; exit 77; }
for t in wrk bpftrace; do
  command -v $t >/dev/null || { echo "recorder_bursts: $t not installed" >&2; exit 77; }
done
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$build/examples/http_server" --port "$port" >"$tmp/server.out" 2>/dev/null &
pids+=($!)
for _ in $(seq 50); do grep -q '^port' "$tmp/server.out" && break; sleep 0.1; done
server=$(awk '/^pid/ {print $2}' "$tmp/server.out")
url=http://127.0.0.1:$port/
wrk -t1 -c8 -d1s "$url" >/dev/null                   # warm up

"$build/viewer/loopscope" record -p "$server" -o "$tmp/trace.db" 2>"$tmp/record.err" &
rec=$!
pids+=($rec)
for _ in $(seq 100); do grep -q '^recording' "$tmp/record.err" && break; sleep 0.1; done
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
pids+=($bt)
sleep 2                                               # bpftrace attaches
echo "recorder_bursts: $build/examples/http_server under wrk -t1 -c8 -d${secs}s --latency, recorded by pid"
wrk -t1 -c8 -d"${secs}s" --latency "$url" | grep -E "Requests/sec|^ +(50|90|99)%"
kill -INT "$bt"; wait "$bt" || true
kill -INT "$rec"; wait "$rec" || true
tail -1 "$tmp/record.err"
grep -v '^Attaching\|RLIMIT_MEMLOCK' "$tmp/bt.out" | sed '/^$/d'
