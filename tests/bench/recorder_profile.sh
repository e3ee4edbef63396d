#!/usr/bin/env bash
# tests/bench/recorder_profile.sh [BUILD] [SECONDS]
#
# Where the recorder's CPU goes while it records examples/http_server
# under `wrk -t1 -c8` (default: build/, 20 s): `perf record -g` of the
# recorder (cpu-clock at 4 kHz; a VM has no hardware counters) from 3 s
# into the wrk run, then the share of its samples under each part of its
# work, callers included: ingest (ls_on_msg: check, decode, encode),
# within it the chunk encoder (ls_chunkw_add) and the task lookup
# (ls_tasks_find); SQLite's page writes (pwrite), its syncs at WAL
# checkpoints (fdatasync); the sleeps between drains (poll: the
# scheduler's work at each wakeup); reading kept batches out of the
# target (process_vm_readv) and what of it went to the backlog
# (hold_msg; tracer/backlog.c), the priority watchdog's sleeps
# (clock_nanosleep; tracer/prio.c); then the 15 busiest functions by
# their own samples.  $HR_RECORD_ARGS are passed to record (e.g.
# "--backlog 512M"; LOOPSCOPE_TEST_BACKLOG=hold in the environment keeps
# the backlog from storing before it is full).  The first seconds are
# left out: they hold one-off work (symbols, the snapshot).  A
# benchmark: prints numbers.  Root,
# wrk, perf; exit status 77 without them.
set -euo pipefail
build=$(realpath "${1:-build}")
secs=${2:-20}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/http_record.sh"
hr_require recorder_profile wrk perf
hr_start_server "$build"
hr_start_recorder "$build"
echo "recorder_profile: $build/examples/http_server under wrk -t1 -c8 -d$((secs + 5))s, recorded by pid; perf of the recorder for ${secs} s"
wrk -t1 -c8 -d"$((secs + 5))s" "$url" | grep -E "Requests/sec" &
w=$!
sleep 3
perf record -F 3999 -g -o "$tmp/perf.data" -p "$rec" -- sleep "$secs" >/dev/null 2>&1
wait "$w"
hr_stop_recorder
perf report -i "$tmp/perf.data" --children --sort symbol --stdio -g none 2>/dev/null >"$tmp/children.txt"
perf report -i "$tmp/perf.data" --no-children --sort symbol --stdio -g none 2>/dev/null >"$tmp/self.txt"
total=$(perf script -i "$tmp/perf.data" -F period 2>/dev/null | wc -l)
echo "samples: $total"
echo "part (callers included)     share"
for f in ls_on_msg ls_chunkw_add ls_tasks_find __libc_pwrite fdatasync __poll \
         process_vm_readv hold_msg clock_nanosleep@GLIBC_2.2.5; do
  awk -v f="$f" '$4 == f {printf "  %-26s %s\n", f, $1; found = 1; exit}
                 END {if (!found) printf "  %-26s 0%%\n", f}' "$tmp/children.txt"
done
echo "busiest functions (own samples)"
grep -v '^#' "$tmp/self.txt" | grep '%' | head -15 | awk '{printf "  %7s  %s\n", $1, $3}'
