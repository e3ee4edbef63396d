#!/usr/bin/env bash
# tests/bench/suite_times.sh LOG [LABEL_REGEX] -- the time of each test in a
# ctest log (what `ctest` printed: "N/M Test #K: NAME ... Passed  S sec"),
# the longest first, and their sum; only the tests whose name matches
# LABEL_REGEX (an extended regex, default: all).  For tests/README.md's
# figures on how long the suites take: run on the log tests/run.sh or
# .ci/run printed.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
log=$1 re=${2:-.}
sed -nE 's/^[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) [. ]*[A-Za-z* ]+ +([0-9.]+) sec$/\2 \1/p' "$log" |
  awk -v re="$re" '$2 ~ re' | sort -rn |
  awk '{ s += $1; print } END { printf "sum %.1f s over %d tests\n", s, NR }'
