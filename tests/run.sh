#!/usr/bin/env bash
# tests/run.sh -- set up, build and run every test suite.
#
# On a fresh Debian 12 machine (as root) it installs what is missing, then
# configures and builds build/ (RelWithDebInfo) and build-asan/
# (ASan+UBSan), runs every ctest suite in build/ and the libevl suites and
# the reader fuzz pass (labels "loop", "fuzz") in build-asan/.  A third
# configuration, build-min/, is libevl alone (EVL_PROBES, LOOPSCOPE_TRACER,
# LOOPSCOPE_VIEWER and LOOPSCOPE_BENCH off): it must configure without
# pkg-config and compile without the headers of systemtap-sdt, libbpf,
# elfutils, SQLite and Graphviz (see build_min), and runs the "loop" suites.
# Exits non-zero on any failure.  Under CI=true a skipped test (exit 77,
# e.g. missing privileges) is a failure.
#
#   tests/run.sh            everything
#   tests/run.sh -R NAME    pass extra arguments to both ctest runs
#   tests/run.sh --stress [--passes N] [--hogs N] [--no-io] [--dir DIR] [ctest args]
#                           under load: builds DIR (build/) as above, then
#                           runs the tests labelled bpf N times (3) beside N
#                           CPU hogs per CPU (1: `while :; do :; done`, every
#                           core busy) and an I/O hog (dd of 64 MiB with
#                           fsync, in a loop); exits non-zero on any failure.
#                           See tests/README.md, "Under load".
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
stress=0 passes=3 hogs_per_cpu=1 io_hog=1 stress_dir=build
if [ "${1:-}" = --stress ]; then
  stress=1
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --passes) passes=$2; shift 2 ;;
      --hogs) hogs_per_cpu=$2; shift 2 ;;
      --no-io) io_hog=0; shift ;;
      --dir) stress_dir=$2; shift 2 ;;
      *) break ;;
    esac
  done
fi
. tests/deps.sh
loopscope_install_deps
loopscope_install_sid_pythons

jobs=$(nproc)
build() { # dir, extra cmake args...
  local dir=$1; shift
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}
run_ctest() { # dir, ctest args...
  local dir=$1; shift
  local log="$dir/${ctest_log:-ctest-output.log}"
  local retries="$dir/tests/diff/retries.log"   # see tests/diff/README.md, "Retries"
  local rc=0
  rm -f "$retries"
  (cd "$dir" && ctest --output-on-failure -j "$jobs" --timeout 600 "$@") 2>&1 | tee "$log" || rc=$?
  # A real-clock diff test that passed only on its retry passed, but it is
  # shown and counted here rather than hidden in ctest's passing output.
  if [ -s "$retries" ]; then
    echo "tests/run.sh: $(wc -l <"$retries") real-clock diff test(s) in $dir passed only on retry:"
    sed 's/^/  /' "$retries"
  fi | tee -a "$log"
  if [ "$rc" -ne 0 ]; then return "$rc"; fi
  if [ "${CI:-}" = true ] && grep -q '\*\*\*Skipped\|Not Run' "$log"; then
    echo "tests/run.sh: CI=true and some tests were skipped:" >&2
    grep '\*\*\*Skipped\|Not Run' "$log" >&2
    return 1
  fi
}

# libevl alone.  Proves that it needs none of the tracer's or viewer's
# packages even though they are installed here: pkg-config finds nothing
# (PKG_CONFIG_LIBDIR) and may not even be looked for, and an include
# directory searched first holds a header with #error for each of their
# headers, so any #include of one fails the build.  The cache must not name
# any of their lookups either.
build_min() { # dir
  local dir=$1 poison h
  poison=$(realpath -m "$dir")/poison-include
  rm -rf "$dir"
  for h in sys/sdt.h bpf/libbpf.h bpf/bpf.h elfutils/libdw.h elfutils/libdwfl.h \
           libelf.h gelf.h sqlite3.h graphviz/gvc.h graphviz/cgraph.h; do
    mkdir -p "$(dirname "$poison/$h")"
    echo "#error \"the libevl-only build must not include <$h>\"" >"$poison/$h"
  done
  PKG_CONFIG_LIBDIR=/nonexistent build "$dir" -DEVL_PROBES=OFF -DLOOPSCOPE_TRACER=OFF \
    -DLOOPSCOPE_VIEWER=OFF -DLOOPSCOPE_BENCH=OFF -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON \
    --no-warn-unused-cli "-DCMAKE_C_FLAGS=-I$poison"
  if grep -E '^(BPF_CLANG|BPFTOOL|LIBBPF|LIBDW|LIBELF|SQLITE|GVC|HAVE_SYS_SDT_H|PKG_CONFIG)[_:A-Z]*[:=]' \
       "$dir/CMakeCache.txt" >&2; then
    echo "tests/run.sh: the libevl-only configure looked for the packages above" >&2
    return 1
  fi
}

# Under load (--stress): the bpf suites beside CPU hogs on every core and an
# I/O hog, `passes` times.  Every hog is its own process group, killed by
# that group's id when this script ends, however it ends.
stress_pids=()
stop_hogs() {
  local p
  for p in "${stress_pids[@]}"; do kill -- "-$p" 2>/dev/null || true; done
  for p in "${stress_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  stress_pids=()
  if [ -n "${stress_tmp:-}" ]; then rm -rf "$stress_tmp"; fi
}
start_hogs() {
  local n i
  n=$(( $(nproc) * hogs_per_cpu ))
  for ((i = 0; i < n; i++)); do
    setsid bash -c 'while :; do :; done' & stress_pids+=($!)
  done
  if [ "$io_hog" = 1 ]; then
    stress_tmp=$(mktemp -d "${TMPDIR:-/tmp}/loopscope-stress.XXXXXX")
    setsid bash -c 'while :; do dd if=/dev/zero of="$1/io" bs=1M count=64 conv=fsync status=none; done' \
      io-hog "$stress_tmp" & stress_pids+=($!)
  fi
  echo "tests/run.sh: $n CPU hog(s) on $(nproc) CPU(s)$([ "$io_hog" = 1 ] && echo ', an I/O hog (dd 64 MiB + fsync, looped)')"
}
if [ "$stress" = 1 ]; then
  trap stop_hogs EXIT
  trap 'exit 130' INT TERM
  build "$stress_dir"
  status=0 failed=0
  for ((pass = 1; pass <= passes; pass++)); do
    echo "== stress pass $pass of $passes: the bpf suites in $stress_dir/ under load"
    start_hogs
    t0=$(date +%s)
    rc=0
    ctest_log="ctest-stress-$pass.log" run_ctest "$stress_dir" -L bpf "$@" || rc=$?
    stop_hogs
    echo "tests/run.sh: stress pass $pass: $(grep -E 'tests passed' "$stress_dir/ctest-stress-$pass.log" || echo 'no summary') ($(( $(date +%s) - t0 )) s)"
    if [ "$rc" -ne 0 ]; then status=1; failed=$((failed + 1)); fi
  done
  echo "tests/run.sh: stress: $((passes - failed)) of $passes passes without a failure"
  exit $status
fi

build build
build build-asan -DEVL_SANITIZE=ON -DLOOPSCOPE_BENCH=OFF
build_min build-min

status=0
echo "== all suites (build/)"
run_ctest build "$@" || status=1
echo "== libevl suites under ASan+UBSan (build-asan/)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  run_ctest build-asan -L "loop|fuzz" "$@" || status=1
echo "== libevl suites, libevl built alone (build-min/)"
run_ctest build-min -L loop "$@" || status=1
exit $status
