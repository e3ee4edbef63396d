#!/usr/bin/env bash
# tests/bench/save_result.sh NAME [--out DIR] -- COMMAND [ARG...]
#
# Runs a benchmark and keeps what it printed, with what the numbers depend
# on, in DIR/NAME.txt (DIR: tests/bench/results/ next to this script).  The
# figures quoted in the READMEs come from these files, so each one says
# how it was made: the command, the commit, the date, the machine (nproc,
# CPU model, kernel) and its load (uptime) before and after the run.
# $SAVE_RESULT_NOTE, when set, is added as a "note:" line (e.g. how the
# build differs from the commit).  Exits with the benchmark's status; the
# file is written either way.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 3 ] || { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
name=$1; shift
out_dir=$here/results
if [ "$1" = --out ]; then out_dir=$2; shift 2; fi
[ "$1" = -- ] || { echo "save_result.sh: expected -- before the command" >&2; exit 2; }
shift
mkdir -p "$out_dir"
out=$out_dir/$name.txt
commit=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$here" status --porcelain --untracked-files=no 2>/dev/null | wc -l)
{
  echo "# command:  $*"
  echo "# cwd:      $PWD"
  echo "# commit:   $commit ($dirty files modified in the work tree)"
  echo "# date:     $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# machine:  $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(uname -sr)"
  echo "# before:   $(uptime)"
  if [ -n "${SAVE_RESULT_NOTE:-}" ]; then echo "# note:     $SAVE_RESULT_NOTE"; fi
  echo
} >"$out"
rc=0
"$@" 2>&1 | tee -a "$out" || rc=$?
{ echo; echo "# after:    $(uptime)"; echo "# exit status $rc"; } >>"$out"
echo "save_result.sh: wrote $out" >&2
exit "$rc"
