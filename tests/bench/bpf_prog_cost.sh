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
[ "$(id -u)" -eq 0 ] || { echo "bpf_prog_cost: needs root" >&2; exit 77; }
for t in wrk bpftool; do
  command -v $t >/dev/null || { echo "bpf_prog_cost: $t not installed" >&2; exit 77; }
done
tmp=$(mktemp -d)
pids=()
was=$(sysctl -n kernel.bpf_stats_enabled)
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sysctl -q kernel.bpf_stats_enabled="$was"
  rm -rf "$tmp"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$build/examples/http_server" --port "$port" >"$tmp/server.out" 2>/dev/null &
pids+=($!)
for _ in $(seq 50); do grep -q '^port' "$tmp/server.out" && break; sleep 0.1; done
server=$(awk '/^pid/ {print $2}' "$tmp/server.out")
url=http://127.0.0.1:$port/
wrk -t1 -c8 -d1s "$url" >/dev/null                   # warm up

sysctl -q kernel.bpf_stats_enabled=1
"$build/viewer/loopscope" record -p "$server" -o "$tmp/trace.db" 2>"$tmp/record.err" &
rec=$!
pids+=($rec)
for _ in $(seq 100); do grep -q '^recording' "$tmp/record.err" && break; sleep 0.1; done
sleep 1
bpftool prog show -j >"$tmp/before.json"
echo "bpf_prog_cost: $build/examples/http_server under wrk -t1 -c8 -d${secs}s, recorded by pid"
wrk -t1 -c8 -d"${secs}s" "$url" | grep -E "Requests/sec"
bpftool prog show -j >"$tmp/after.json"
kill -INT "$rec"; wait "$rec" || true
tail -1 "$tmp/record.err"
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
