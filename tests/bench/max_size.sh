#!/usr/bin/env bash
# tests/bench/max_size.sh [BUILD] [SIZE...] -- how close `record --max-size`
# comes to its cap on the busiest rows this repo's server makes:
# examples/http_server under `wrk -t1 -c8 -H "Connection: close"` (a task
# per request), recorded by pid with --max-size SIZE (default 8M 128M) until
# the size stops it.  Prints, per size, the finished file's size, the tasks
# in it, the bytes its task_stats and task_slices take (written at the end)
# per task, the stop reason and the recorder's wall time.  Root, wrk,
# sqlite3.  A benchmark: it prints numbers, it does not pass or fail.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
shift || true
[ $# -gt 0 ] || set -- 8M 128M
ls=$build/viewer/loopscope
dir=$(mktemp -d /tmp/ls-max-size.XXXXXX)
srv= wrk=
cleanup() {
  for p in $wrk $srv; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
printf '%-8s %10s %9s %14s %-18s %7s\n' size "file MiB" tasks "end B/task" stop "wall s"
for size in "$@"; do
  "$build/examples/http_server" --port 0 > "$dir/server.log" 2>&1 &
  srv=$!
  for _ in $(seq 100); do grep -q '^port' "$dir/server.log" && break; sleep 0.05; done
  port=$(awk '/^port/{print $2}' "$dir/server.log")
  wrk -t1 -c8 -d600s -H "Connection: close" "http://127.0.0.1:$port/" > /dev/null 2>&1 &
  wrk=$!
  t0=$(date +%s.%N)
  "$ls" record -q -p "$srv" --max-size "$size" -d 590 -o "$dir/t.db"
  t1=$(date +%s.%N)
  kill "$wrk" "$srv"; wait "$wrk" "$srv" 2>/dev/null || true
  wrk= srv=
  bytes=$(stat -c %s "$dir/t.db")
  read -r tasks end stop < <(sqlite3 -separator ' ' "$dir/t.db" \
    "SELECT (SELECT count(*) FROM tasks),
            (SELECT sum(pgsize) FROM dbstat WHERE name IN ('task_stats', 'task_slices')),
            replace((SELECT value FROM meta WHERE key = 'stop_reason'), ' ', '_')")
  printf '%-8s %10.2f %9d %14.1f %-18s %7.1f\n' "$size" "$(echo "$bytes / 1048576" | bc -l)" \
    "$tasks" "$(echo "$end / $tasks" | bc -l)" "$stop" "$(echo "$t1 - $t0" | bc -l)"
  rm -f "$dir/t.db"
done
