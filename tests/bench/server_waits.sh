#!/usr/bin/env bash
# tests/bench/server_waits.sh [BUILD] [SECONDS] [ROUNDS] [BEFORE_BUILD]
#
# How long examples/http_server's loop thread waits for a CPU, and after
# whom, while `wrk -t1 -c8 -dSECONDS --latency` drives it (default:
# build/, 5 s, 2 rounds): untraced, then recorded with each --priority
# (idle, batch), in turn, ROUNDS times, on one server; with BEFORE_BUILD,
# idle and that build's recorder (mode "before", its default priority)
# instead.  For each run: wrk's requests/s and p99, a bpftrace count of
# the server's waits -- from its wakeup, or from being preempted, to
# running again -- in buckets of microseconds, with the thread that ran
# on that CPU just before it for the waits of 30 us or more, and for a
# recorded run how often the watchdog raised the recorder (meta
# priority_raises).  On a 2-CPU machine the server shares with wrk and
# the recorder, its p99 follows those long waits
# (results/burst_latency.txt); the "after" column says whose they are.
# bpftrace's own programs run in every run alike.  A benchmark: prints
# numbers.  Root, wrk, bpftrace; exit status 77 without them.
set -euo pipefail
build=$(realpath "${1:-build}")
secs=${2:-5}
rounds=${3:-2}
before=${4:+$(realpath "$4")}
modes="untraced idle batch"
[ -z "$before" ] || modes="untraced idle before"
here=$(cd "$(dirname "$0")" && pwd)
. "$here/http_record.sh"
hr_require server_waits wrk bpftrace
hr_start_server "$build"
cat >"$tmp/waits.bt" <<'BT'
tracepoint:sched:sched_wakeup /args->pid == $1/ { @since = nsecs; }
tracepoint:sched:sched_switch /args->prev_pid == $1 && args->prev_state == 0/ { @since = nsecs; }
tracepoint:sched:sched_switch /args->next_pid == $1 && @since/ {
  $us = (nsecs - @since) / 1000;
  @waits[$us < 2 ? 0 : $us < 8 ? 1 : $us < 30 ? 2 : $us < 100 ? 3 : $us < 300 ? 4 : 5] = count();
  if ($us >= 30) { @after[args->prev_comm] = count(); }
  @since = 0;
}
END { clear(@since); }
BT
echo "server_waits: $build/examples/http_server under wrk -t1 -c8 -d${secs}s --latency, $rounds rounds"
echo "waits of the server's thread for a CPU, in us: <2, 2-8, 8-30, 30-100, 100-300, >=300;"
echo "after: who ran on its CPU just before the waits of 30 us or more (top 3)"
for r in $(seq "$rounds"); do
  for mode in $modes; do
    case $mode in
      untraced) ;;
      before) hr_start_recorder "$before"; sleep 1 ;;
      *) HR_RECORD_ARGS="--priority $mode" hr_start_recorder "$build"; sleep 1 ;;
    esac
    BPFTRACE_MAX_MAP_KEYS=256 bpftrace "$tmp/waits.bt" "$server" >"$tmp/bt.out" 2>&1 &
    bt=$!
    hr_pids+=($bt)
    sleep 2                                           # bpftrace attaches
    w=$(wrk -t1 -c8 -d"${secs}s" --latency "$url")
    kill -INT "$bt"; wait "$bt" || true
    raises=
    if [ "$mode" != untraced ]; then
      hr_stop_recorder >/dev/null
      raises=$(sqlite3 "$tmp/trace.db" \
        "SELECT coalesce((SELECT value FROM meta WHERE key = 'priority_raises'), '-')")
      rm -f "$tmp/trace.db"
    fi
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$w")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$w")
    buckets=$(for b in 0 1 2 3 4 5; do
                sed -n "s/^@waits\[$b\]: \([0-9]*\)$/\1/p" "$tmp/bt.out" | grep . || echo 0
              done | paste -sd' ')
    after=$(sed -n 's/^@after\[\(.*\)\]: \([0-9]*\)$/\2 \1/p' "$tmp/bt.out" | sort -rn | head -3 |
              awk '{n = $1; $1 = ""; printf "%s%s %d", (NR > 1 ? ", " : ""), substr($0, 2), n}')
    printf '%d %-8s %9.0f req/s  p99 %-9s waits %s  after: %s%s\n' \
      "$r" "$mode" "$rps" "$p99" "$buckets" "$after" "${raises:+  raises $raises}"
  done
done
