#!/usr/bin/env bash
# tests/bench/ingest_count.sh [BUILD] [EVENTS_IN_THOUSANDS]
#
# The recorder's ingest counted instead of timed: bench_ingest (the
# recorder's work per message, no target, no BPF) under valgrind's
# callgrind with N thousand events (default 200), and the instructions
# per event of the ingest (ls_ingest_msg with all it calls: checks, task
# rows, encoding, SQLite) and of the encoder (ls_chunkw_add, its own
# instructions), which do not depend on the machine's load.  A benchmark:
# prints numbers.  Needs valgrind (exit status 77 without it).
set -euo pipefail
build=$(realpath "${1:-build}")
k=${2:-200}
command -v valgrind >/dev/null || { echo "ingest_count: valgrind not installed" >&2; exit 77; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$out" \
  "$build/tests/bench/bench_ingest" --repeats 1 --n "$k" >/dev/null 2>&1
events=$((k * 1000))
echo "ingest_count: $build/tests/bench/bench_ingest --n $k under callgrind, instructions per event"
callgrind_annotate --inclusive=yes "$out" 2>/dev/null |
  awk -v n="$events" '/ls_ingest_msg[^ ]* \[/ && !seen++ { gsub(",", "", $1); printf "ingest (inclusive)     %8.1f\n", $1 / n }'
callgrind_annotate "$out" 2>/dev/null |
  awk -v n="$events" '/ls_chunkw_add \[/ { gsub(",", "", $1); printf "ls_chunkw_add (self)   %8.1f\n", $1 / n }'
