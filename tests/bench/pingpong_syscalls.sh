#!/usr/bin/env bash
# tests/bench/pingpong_syscalls.sh [--n N] [BUILD_DIR] -- syscalls per ping-pong round trip.
#
# Counts, with `strace -f -c`, the syscalls each implementation of
# bench_pingpong makes in one run of N round trips (default 20000) and in
# one of 2N, and prints the difference divided by N, so setup and teardown
# cancel out.  A count, not a timing: it does not depend on the machine's
# load.  run.sh prints it after its table; tests/bench/results/
# pingpong_syscalls.txt is its output, and the READMEs' syscall counts per
# round trip come from there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
n=20000
if [ "${1:-}" = --n ]; then n=$2; shift 2; fi
dir=${1:-$here/../../build}
bin=$dir/tests/bench/bench_pingpong
command -v strace >/dev/null || { echo "pingpong_syscalls.sh: needs strace" >&2; exit 77; }
[ -x "$bin" ] || { echo "pingpong_syscalls.sh: $bin is not built" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM
total() { # impl, round trips -> total syscalls
  strace -f -c -o "$tmp/c" "$bin" --impl "$1" --repeats 1 --n "$2" >/dev/null
  # the total line: "% time, seconds, usecs/call, calls, [errors,] total"
  awk '$NF == "total" { print $4 + 0 }' "$tmp/c"
}
printf '%-12s %s\n' impl "syscalls per round trip"
for impl in evl epoll libev libuv libuv-poll; do
  a=$(total "$impl" "$n")
  b=$(total "$impl" $((2 * n)))
  awk -v a="$a" -v b="$b" -v n="$n" -v i="$impl" 'BEGIN { printf "%-12s %.2f\n", i, (b - a) / n }'
done
