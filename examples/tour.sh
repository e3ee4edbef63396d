#!/usr/bin/env bash
# examples/tour.sh -- the commands of README.md's "A tour", run for real,
# each printed as `$ COMMAND` followed by its output: README's console
# blocks are pasted from what this prints (examples/tour.out is the run
# they come from).  Needs root (BPF) and what tests/run.sh builds in build/
# (loopscope, the examples, build/model/loopscope_events.so), curl and the
# sqlite3 shell.  Leaves trace.db, dl.db, lifecycle.svg, blocking.svg and
# trace.pftrace in a temporary directory it removes, and stops the server.
#
#   examples/tour.sh > examples/tour.out
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d /tmp/loopscope-tour.XXXXXX)
srv=
cleanup() {
  [ -n "$srv" ] && kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
ln -s "$root/build" "$work/build"
cd "$work"

# Print a command as typed (shown), then run it (run: the same with the
# temporary directory's paths, or a pipeline) and print what it printed.
show() { # shown [run]
  printf '$ %s\n' "$1"
  bash -c "${2:-$1}" 2>&1 || true   # lint exits 1 when it warns
}

printf '$ build/examples/http_server --port 8080 &\n'
build/examples/http_server --port 8080 > server.log 2>&1 &
srv=$!
for _ in $(seq 100); do grep -q '^port' server.log 2>/dev/null && break; sleep 0.05; done
traffic='for i in $(seq 30); do for r in / /block /offload; do curl -s -o /dev/null localhost:8080$r; done; done; curl -s -o /dev/null localhost:8080/leak'
printf '$ %s\n' "$traffic"
# The traffic runs while the recorder records (the README shows them one
# after the other, as typed in two terminals).
bash -c "sleep 0.5; $traffic" &
traffic_pid=$!
echo
show 'build/viewer/loopscope record -p $(pidof http_server) -d 5 -o trace.db' \
     "build/viewer/loopscope record -p $srv -d 5 -o trace.db"
wait "$traffic_pid"
echo
show 'build/viewer/loopscope info trace.db | head -10'
echo
show 'build/viewer/loopscope blocking trace.db --limit 1'
echo
show 'build/viewer/loopscope tasks trace.db --sort busy --limit 5'
echo
show "COLUMNS=100 build/viewer/loopscope timeline trace.db --tasks 'handle_conn#*' --limit 6"
echo
show 'build/viewer/loopscope lint trace.db | tail -2'
echo
show 'build/viewer/loopscope record -q -o dl.db -- build/examples/deadlock --seconds 0.5'
show 'build/viewer/loopscope lint dl.db'
echo
show 'build/viewer/loopscope graph trace.db --kind lifecycle -o lifecycle.svg'
show 'build/viewer/loopscope graph trace.db --kind blocking -o blocking.svg'
echo
show 'build/viewer/loopscope export trace.db -o trace.pftrace      # --format chrome-json: JSON'
echo
show "sqlite3 -cmd '.load build/model/loopscope_events' -header -column trace.db \"SELECT kind, reason, count(*) AS n FROM events_named WHERE kind = 'task_suspend' GROUP BY reason\""
