#!/usr/bin/env bash
# tests/bench/trace_clock_ab.sh BUILD [BEFORE_BUILD] [ROUNDS]
#
# What the records' clock costs libevl while a tracer records: the traced
# benchmarks (bench.h --traced: the batch semaphore raised by hand, no
# BPF) of BUILD with records stamped from the TSC between clock anchors
# (the default, loop/src/trace.h) and with EVL_TRACE_TSC=0 (the clock
# read for each record, through the anchor's slow path), and, given
# BEFORE_BUILD, the same benchmarks of another build (e.g. one before the
# TSC, whose records each called clock_gettime inline), alternated ROUNDS
# times (default 3); then BUILD untraced for reference.  A benchmark:
# prints the RESULT lines (ns per yield, round trips per second; best and
# median of 7 repeats).
set -euo pipefail
b=$(realpath "${1:-build}")/tests/bench
before=${2:+$(realpath "$2")/tests/bench}
rounds=${3:-3}
run() {    # label, bench dir, env...
  local label=$1 dir=$2
  shift 2
  for series in yield-2 yield; do
    echo "$label: $(env "$@" "$dir/bench_yield" --series "$series" --traced --repeats 7 | grep RESULT)"
  done
  echo "$label: $(env "$@" "$dir/bench_pingpong" --traced --impl evl --repeats 7 | grep RESULT)"
}
for i in $(seq "$rounds"); do
  [ -n "$before" ] && run "round $i, before" "$before"
  run "round $i, tsc" "$b"
  run "round $i, EVL_TRACE_TSC=0" "$b" EVL_TRACE_TSC=0
done
echo "untraced: $("$b/bench_yield" --series yield-2 --repeats 7 | grep RESULT)"
echo "untraced: $("$b/bench_yield" --series yield --repeats 7 | grep RESULT)"
echo "untraced: $("$b/bench_pingpong" --impl evl --repeats 7 | grep RESULT)"
