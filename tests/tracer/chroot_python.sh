#!/bin/sh
# chroot_python.sh ROOT PYTHON [ARGS...] -- runs PYTHON (a path inside the
# root file system ROOT, e.g. Debian unstable's /usr/bin/python3.14 made by
# tests/deps.sh) under chroot, the way a container runs it: its files are
# seen from outside only through /proc/PID/root.  In a mount namespace of
# its own (gone with the process), /proc, /dev, /tmp and the source tree
# this script is in (builds included) are bound at the same paths inside,
# so the tests' scripts and temporary files are where the tests expect
# them.  Every step execs: the PID the caller started is the interpreter's.
# Needs root.
set -e
root=$1 python=$2
shift 2
src=$(cd "$(dirname "$0")/../.." && pwd -P)
exec unshare --mount --propagation private /bin/sh -c '
  set -e
  root=$1 src=$2 python=$3
  shift 3
  for d in /proc /dev /tmp "$src"; do
    mkdir -p "$root$d"
    mount --rbind "$d" "$root$d"
  done
  exec chroot "$root" "$python" "$@"' sh "$root" "$src" "$python" "$@"
