# tests/bench/http_record.sh -- sourced by the benchmarks that watch the
# recorder at work on examples/http_server under wrk (recorder_bursts.sh,
# bpf_prog_cost.sh, recorder_preempts.sh, recorder_profile.sh,
# recorder_ab.sh, server_waits.sh): the checks, the temporary directory,
# the processes and their cleanup, one function per step.
#
#   hr_require NAME TOOL...   root and TOOLs, else exit 77 (NAME: the script's);
#                             with bpftrace, tracefs mounted
#   hr_start_server BUILD     BUILD/examples/http_server on a free port, warmed
#                             up with 1 s of wrk: sets $server (pid), $url
#   hr_start_recorder BUILD   BUILD/viewer/loopscope record -p $server, once it
#                             says it records: sets $rec (pid)
#   hr_stop_recorder          SIGINT, wait, print its last line
#   hr_steal                  the machine's steal and total CPU ticks so far
#                             (/proc/stat), two numbers
#
# $tmp is the temporary directory; hr_pids the processes killed at exit;
# hr_on_exit, if the script defines it, runs at exit before the cleanup.

hr_require() {
  local name=$1 t
  shift
  [ "$(id -u)" -eq 0 ] || { echo "$name: needs root" >&2; exit 77; }
  for t in "$@"; do
    command -v "$t" >/dev/null || { echo "$name: $t not installed" >&2; exit 77; }
  done
  # bpftrace finds tracepoints in tracefs, which a fresh machine may not
  # have mounted ("tracepoint not found: sched:sched_wakeup")
  if [[ " $* " == *" bpftrace "* ]] && [ ! -d /sys/kernel/tracing/events ]; then
    mount -t tracefs nodev /sys/kernel/tracing ||
      { echo "$name: cannot mount tracefs on /sys/kernel/tracing" >&2; exit 1; }
  fi
}

tmp=$(mktemp -d)
hr_pids=()
hr_cleanup() {
  local p
  if declare -F hr_on_exit >/dev/null; then hr_on_exit; fi
  for p in "${hr_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap hr_cleanup EXIT

hr_start_server() {
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$1/examples/http_server" --port "$port" >"$tmp/server.out" 2>/dev/null &
  hr_pids+=($!)
  for _ in $(seq 50); do grep -q '^port' "$tmp/server.out" && break; sleep 0.1; done
  server=$(awk '/^pid/ {print $2}' "$tmp/server.out")
  url=http://127.0.0.1:$port/
  wrk -t1 -c8 -d1s "$url" >/dev/null                 # warm up
}

hr_start_recorder() {
  "$1/viewer/loopscope" record -p "$server" -o "$tmp/trace.db" ${HR_RECORD_ARGS:-} 2>"$tmp/record.err" &
  rec=$!
  hr_pids+=($rec)
  for _ in $(seq 100); do grep -q '^recording' "$tmp/record.err" && break; sleep 0.1; done
}

hr_stop_recorder() {
  kill -INT "$rec"; wait "$rec" || true
  tail -1 "$tmp/record.err"
}

hr_steal() { awk '/^cpu / {print $9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
