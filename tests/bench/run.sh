#!/usr/bin/env bash
# tests/bench/run.sh -- build and run the benchmarks, print one table.
#
#   tests/bench/run.sh [--quick] [--no-build] [--repeats N] [BUILD_DIR]
#
# BUILD_DIR defaults to build/ at the top of the repository; it is
# configured (RelWithDebInfo) if it has no CMakeCache.txt yet.  --quick uses
# tiny iteration counts (the bench.smoke ctest entry runs it with
# --no-build).  Each benchmark measures libevl and its peers in the same
# process, interleaved; the probes comparison alternates two binaries.  The
# raw RESULT lines are kept in BUILD_DIR/tests/bench/results.txt.  After the
# table it prints the syscalls per ping-pong round trip of each
# implementation (pingpong_syscalls.sh, strace -c; skipped without strace).
#
# Benchmarks run pinned to one CPU (BENCH_CPU, default the last one; set
# BENCH_CPU= to disable).  Exit status is non-zero only when a benchmark
# failed to build or run, never because of a number; a failed benchmark
# does not stop the others (run() records it in $status).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

quick=0 build=1 repeats="" dir=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --no-build) build=0 ;;
    --repeats) repeats=$2; shift ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "error: unknown option '$1'" >&2; exit 2 ;;
    *) dir=$1 ;;
  esac
  shift
done
dir=${dir:-$root/build}
bin=$dir/tests/bench

if [ "$build" = 1 ]; then
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOPSCOPE_BENCH=ON >/dev/null || exit 1
  fi
  cmake --build "$dir" --target bench -j "$(nproc)" >/dev/null || {
    echo "error: cannot build the benchmarks in '$dir'" >&2; exit 1; }
fi
type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$dir/CMakeCache.txt" 2>/dev/null || true)
case $type in
  RelWithDebInfo|Release) ;;
  *) echo "warning: '$dir' is a '$type' build; numbers are only meaningful optimised" >&2 ;;
esac
probes=$(sed -n 's/^EVL_PROBES:[A-Z]*=//p' "$dir/CMakeCache.txt" 2>/dev/null || true)

pin=()
cpu=${BENCH_CPU-$(( $(nproc) - 1 ))}
if [ -n "$cpu" ] && command -v taskset >/dev/null; then pin=(taskset -c "$cpu"); fi

qarg=()
[ "$quick" = 1 ] && qarg=(--quick)
args=("${qarg[@]}")
[ -n "$repeats" ] && args+=(--repeats "$repeats")

out=$(mktemp)
trap 'rm -f "$out"' EXIT
trap 'exit 1' HUP INT TERM   # through the EXIT trap: the temporary file goes
status=0
run() { # label, command...
  local label=$1; shift
  echo "running $label" >&2
  if ! "${pin[@]}" "$@" >>"$out"; then
    echo "error: benchmark '$label' failed: $*" >&2
    status=1
  fi
}

run switch   "$bin/bench_switch" "${args[@]}"
run spawn    "$bin/bench_spawn" "${args[@]}"
run yield    "$bin/bench_yield" "${args[@]}"
run asyncio  python3 "$here/bench_asyncio.py" all "${args[@]}"
run timers   "$bin/bench_timers" "${args[@]}"
run pingpong "$bin/bench_pingpong" "${args[@]}"
run queue    "$bin/bench_queue" "${args[@]}"

# Probes compiled in (detached) vs compiled out, on ping-pong (the target),
# on the 1000-task yield (a CPU-bound path) and on the queue handoff (the
# synchronisation primitives' suspend reasons): each pair of binaries
# alternates, one measurement per process, twice the usual number of rounds
# because the difference sought is ~1%.
rounds=$(( ${repeats:-7} * 2 ))
[ "$quick" = 1 ] && rounds=1
probe_round() { # series name, binary, impl, lines to keep (regex)
  local series=$1 b=$2 impl=$3 keep=$4 before
  before=$(wc -l <"$out")
  run "probes ($b)" "$bin/$b" --impl "$impl" --repeats 1 "${qarg[@]}"
  # Keep the lines just added that belong to the series, renamed.
  sed -i "$((before + 1)),\$ { /^RESULT $keep /!d; s/^RESULT $keep /RESULT $series /; }" "$out"
}
for ((i = 0; i < rounds; i++)); do
  probe_round probes bench_pingpong evl pingpong
  probe_round probes bench_pingpong_noprobes evl-noprobes pingpong
  probe_round probes-yield bench_yield evl yield
  probe_round probes-yield bench_yield_noprobes evl-noprobes yield
  probe_round probes-queue bench_queue evl queue
  probe_round probes-queue bench_queue_noprobes evl-noprobes queue
done

mkdir -p "$bin" && cp "$out" "$bin/results.txt"
echo
python3 "$here/table.py" --probes "${probes:-?}" <"$out" || status=1

# Syscalls per ping-pong round trip (strace -c; a count, independent of the
# machine's load): the deterministic side of the ping-pong row.
echo
if command -v strace >/dev/null; then
  sc_n=20000
  [ "$quick" = 1 ] && sc_n=500
  echo "running syscalls per round trip" >&2
  # Not a benchmark failure when strace cannot trace here (no ptrace in a
  # container): the timed ping-pong above ran the same binary already.
  "$here/pingpong_syscalls.sh" --n "$sc_n" "$dir" ||
    echo "warning: pingpong_syscalls.sh failed: syscalls per round trip not counted" >&2
else
  echo "syscalls per ping-pong round trip: not counted (strace is not installed)"
fi
exit $status
