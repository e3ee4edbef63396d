#!/usr/bin/env bash
# examples/demo.sh -- loopscope's showcase, on a fresh Debian 12 machine as
# root: installs what is missing, builds, starts the HTTP server example
# (one route blocks the loop, one does the same work in the executor, one
# leaks a task), drives it with curl, records it by pid with
# `loopscope record -p PID -d N`, prints what loopscope sees (info, tasks,
# timeline, blocking, lint) and writes the graphs, the SVG timeline and a
# Perfetto trace into demo-out/.  Then it does the same for a plain CPython
# asyncio server in the generic loop mode (examples/asyncio_server.py).  It
# stops the servers it started.
#
#   examples/demo.sh            (DEMO_SECONDS=N to record longer; default 6)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. tests/deps.sh
loopscope_install_deps

secs=${DEMO_SECONDS:-6}
build=$root/build
out=$root/demo-out
ls=$build/viewer/loopscope

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "building (cmake, $build)"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" --target loopscope http_server >/dev/null
rm -rf "$out"
mkdir -p "$out"

say "starting examples/http_server"
srv_out=$out/server.log
"$build/examples/http_server" --port 0 > "$srv_out" &
srv=$!
drivers=()
cleanup() {
  for d in "${drivers[@]}"; do kill "$d" 2>/dev/null || true; done
  kill "$srv" 2>/dev/null || true
  wait "$srv" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 100); do grep -q '^port' "$srv_out" 2>/dev/null && break; sleep 0.05; done
port=$(awk '/^port/{print $2}' "$srv_out")
pid=$(awk '/^pid/{print $2}' "$srv_out")
echo "pid $pid, listening on 127.0.0.1:$port"

# N requests to PATH over one keep-alive connection, repeatedly.
drive() { # path n
  local args=() i
  for ((i = 0; i < $2; i++)); do args+=(-o /dev/null "http://127.0.0.1:$port$1"); done
  while :; do curl -s "${args[@]}" || true; sleep 0.05; done
}

say "recording pid $pid for ${secs}s while clients hit /, /block, /offload and /leak"
"$ls" record -p "$pid" -d "$secs" -o "$out/trace.db" &
rec=$!
sleep 1
if command -v wrk >/dev/null; then
  # 32 keep-alive connections on / : many tasks for each stall to delay
  wrk -t 2 -c 32 -d "$((secs - 2))s" "http://127.0.0.1:$port/" > "$out/wrk.log" & drivers+=($!)
else
  drive / 20 & drivers+=($!)
  drive / 20 & drivers+=($!)
fi
drive /offload 5 & drivers+=($!)
drive /block 2 & drivers+=($!)
curl -s -o /dev/null "http://127.0.0.1:$port/leak"
wait "$rec"
cleanup
trap - EXIT

say "loopscope info"
"$ls" info "$out/trace.db"
say "loopscope tasks --sort busy --limit 8"
"$ls" tasks "$out/trace.db" --sort busy --limit 8
say "loopscope timeline --limit 12"
"$ls" timeline "$out/trace.db" --limit 12
say "loopscope blocking --limit 2"
"$ls" blocking "$out/trace.db" --limit 2
say "loopscope lint"
"$ls" lint "$out/trace.db" | tail -n 12

# The generic loop mode: a plain CPython asyncio server (no libevl, no
# change to the program), recorded by pid the same way.
say "any event loop: examples/asyncio_server.py (CPython asyncio), recorded by pid"
py_out=$out/asyncio_server.log
python3 "$root/examples/asyncio_server.py" > "$py_out" &
pysrv=$!
trap 'kill "$pysrv" 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q '^port' "$py_out" 2>/dev/null && break; sleep 0.05; done
pyport=$(awk '/^port/{print $2}' "$py_out")
pypid=$(awk '/^pid/{print $2}' "$py_out")
"$ls" record -p "$pypid" -d 3 -o "$out/asyncio.db" 2> "$out/asyncio_record.log" &
rec=$!
sleep 1
for _ in 1 2 3; do
  curl -s -o /dev/null "http://127.0.0.1:$pyport/" -o /dev/null "http://127.0.0.1:$pyport/report" \
    -o /dev/null "http://127.0.0.1:$pyport/checksum" -o /dev/null "http://127.0.0.1:$pyport/offload"
done
# two tasks that deadlock on two locks, and one left to the garbage collector
curl -s -o /dev/null "http://127.0.0.1:$pyport/transfer" -o /dev/null "http://127.0.0.1:$pyport/leak"
sleep 0.5
say "loopscope ps --tree (the live process, while it records)"
"$ls" ps --tree "$pypid"
wait "$rec"
kill "$pysrv" 2>/dev/null || true
wait "$pysrv" 2>/dev/null || true
trap - EXIT
say "loopscope info (generic loop mode)"
"$ls" info "$out/asyncio.db" | tail -n +6
say "loopscope blocking --limit 1 (generic loop mode)"
"$ls" blocking "$out/asyncio.db" --limit 1 | head -n 14
say "loopscope lint (generic loop mode: the asyncio tasks' lifecycle)"
"$ls" lint "$out/asyncio.db" | grep -E 'leaked-task|deadlock|warnings'
"$ls" graph "$out/asyncio.db" --kind lifecycle -o "$out/asyncio_lifecycle.svg"

say "writing pictures and traces"
"$ls" graph "$out/trace.db" --kind blocking -o "$out/blocking.svg"
"$ls" graph "$out/trace.db" --kind tasks -o "$out/tasks.svg"
"$ls" graph "$out/trace.db" --kind lifecycle -o "$out/lifecycle.svg"
"$ls" timeline "$out/trace.db" --svg "$out/timeline.svg" >/dev/null
"$ls" export "$out/trace.db" -o "$out/trace.pftrace"

say "files written"
cat <<EOF
$out/trace.db              the trace: sqlite3 $out/trace.db, or loopscope sql $out/trace.db "SELECT ..."
$out/blocking.svg          blocking call graph: open in a browser
$out/tasks.svg             task tree (spawn and await edges): open in a browser
$out/lifecycle.svg         lifecycle state diagram with counts and latencies: open in a browser
$out/timeline.svg          the timeline; hover a span for details: open in a browser
$out/trace.pftrace         open https://ui.perfetto.dev and drop the file on it (Perfetto's protobuf format)
$out/asyncio.db            the generic loop mode's trace of examples/asyncio_server.py
$out/asyncio_lifecycle.svg its asyncio tasks' lifecycle state diagram
EOF
