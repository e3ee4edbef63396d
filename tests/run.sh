#!/usr/bin/env bash
# tests/run.sh -- set up, build and run every test suite.
#
# On a fresh Debian 12 machine (as root) it installs what is missing, then
# configures and builds build/ (RelWithDebInfo) and build-asan/
# (ASan+UBSan), runs every ctest suite in build/ and the libevl suites and
# the reader fuzz pass (labels "loop", "fuzz") in build-asan/.  Exits
# non-zero on any failure.  Under CI=true a skipped test (exit 77, e.g.
# missing privileges) is a failure.
#
#   tests/run.sh            everything
#   tests/run.sh -R NAME    pass extra arguments to both ctest runs
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. tests/deps.sh
loopscope_install_deps

jobs=$(nproc)
build() { # dir, extra cmake args...
  local dir=$1; shift
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}
run_ctest() { # dir, ctest args...
  local dir=$1; shift
  local log="$dir/ctest-output.log"
  local rc=0
  (cd "$dir" && ctest --output-on-failure -j "$jobs" --timeout 600 "$@") 2>&1 | tee "$log" || rc=$?
  if [ "$rc" -ne 0 ]; then return "$rc"; fi
  if [ "${CI:-}" = true ] && grep -q '\*\*\*Skipped\|Not Run' "$log"; then
    echo "tests/run.sh: CI=true and some tests were skipped:" >&2
    grep '\*\*\*Skipped\|Not Run' "$log" >&2
    return 1
  fi
}

build build
build build-asan -DEVL_SANITIZE=ON -DLOOPSCOPE_BENCH=OFF

status=0
echo "== all suites (build/)"
run_ctest build "$@" || status=1
echo "== libevl suites under ASan+UBSan (build-asan/)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  run_ctest build-asan -L "loop|fuzz" "$@" || status=1
exit $status
