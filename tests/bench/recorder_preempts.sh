#!/usr/bin/env bash
# tests/bench/recorder_preempts.sh [BUILD] [SECONDS]
#
# How often the recorder takes the CPU from the server it records: for
# each --priority (normal, batch, idle: the default), examples/http_server
# under `wrk -t1 -c8` (default: build/, 5 s) recorded by pid, and a
# bpftrace count of the server's involuntary switches (sched_switch with
# the server as prev, still runnable) by the task that got the CPU,
# loopscope's among them, beside the server's sleeps (switches out to
# wait) and the machine's steal during the run (/proc/stat).  A batch
# that wakes the recorder (when it is not polling: tracer/README.md, "When
# the recorder drains") does it from the server's own thread, so the
# recorder is woken on the server's CPU; SCHED_BATCH, unlike a normal
# thread, does not preempt the thread that woke it.  A benchmark: prints
# numbers.
# Root, wrk, bpftrace; exit status 77 without them.
set -euo pipefail
build=$(realpath "${1:-build}")
secs=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/http_record.sh"
hr_require recorder_preempts wrk bpftrace
hr_start_server "$build"
cat >"$tmp/preempt.bt" <<'BT'
tracepoint:sched:sched_switch /args->prev_pid == $1 && args->prev_state == 0/ {
  @preempted_by[args->next_comm] = count();
}
tracepoint:sched:sched_switch /args->prev_pid == $1 && args->prev_state != 0/ {
  @sleeps = count();
}
BT
echo "recorder_preempts: $build/examples/http_server under wrk -t1 -c8 -d${secs}s, recorded by pid"
for prio in normal batch idle; do
  HR_RECORD_ARGS="--priority $prio" hr_start_recorder "$build"
  BPFTRACE_MAX_MAP_KEYS=64 bpftrace "$tmp/preempt.bt" "$server" >"$tmp/bt.out" 2>&1 &
  bt=$!
  hr_pids+=($bt)
  sleep 2                                             # bpftrace attaches
  read -r s0 t0 < <(hr_steal)
  rps=$(wrk -t1 -c8 -d"${secs}s" "$url" | awk '/Requests\/sec/ {print $2}')
  read -r s1 t1 < <(hr_steal)
  kill -INT "$bt"; wait "$bt" || true
  hr_stop_recorder >/dev/null
  rm -f "$tmp/trace.db"                               # the next run writes its own
  echo "--priority $prio: $rps requests/s, steal $(( (s1 - s0) * 100 / (t1 - t0 > 0 ? t1 - t0 : 1) )) %"
  grep -E '^@' "$tmp/bt.out" | sort -t: -k2 -n -r | head -6 | sed 's/^/  /'
done
