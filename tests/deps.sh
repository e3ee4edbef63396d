# tests/deps.sh -- sourced by tests/run.sh and examples/demo.sh: install the
# Debian packages loopscope needs, when some are missing (needs root).
LOOPSCOPE_PACKAGES="build-essential cmake pkg-config clang llvm libbpf-dev bpftool
  libelf-dev zlib1g-dev libdw-dev libsqlite3-dev sqlite3 libgraphviz-dev graphviz
  systemtap-sdt-dev libuv1-dev libev-dev bpftrace python3 chromium curl wrk
  iproute2 util-linux nodejs redis-server libprotobuf-c-dev protobuf-c-compiler
  protobuf-compiler python3-protobuf tmux libncurses-dev python3-uvloop strace valgrind
  libglib2.0-dev prometheus nginx-light"

loopscope_install_deps() {
  local missing="" p
  for p in $LOOPSCOPE_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "error: missing packages:$missing (run as root to install them)" >&2
    return 1
  fi
  echo "installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

# CPython 3.14 and 3.15 are not in Debian 12; Debian unstable has both
# (and uvloop built for 3.14).  A minimal unstable root at
# $LOOPSCOPE_SID_ROOT holds them, run under chroot
# (tests/tracer/chroot_python.sh), which is also how a containerised target
# looks to the recorder: its files through /proc/PID/root or
# /proc/PID/map_files.  Made once per machine (about 300 MB, a minute);
# the tests that use it are configured only when it exists.  Needs root
# and Debian's archive.
LOOPSCOPE_SID_ROOT=${LOOPSCOPE_SID_ROOT:-/var/cache/loopscope/sid}
LOOPSCOPE_SID_PACKAGES="python3.14 python3.15 python3-uvloop"
loopscope_install_sid_pythons() {
  local r=$LOOPSCOPE_SID_ROOT
  [ "$(cat "$r/.loopscope-packages" 2>/dev/null)" = "$LOOPSCOPE_SID_PACKAGES" ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "note: not root: no Debian-unstable root for CPython 3.14/3.15 tests" >&2
    return 0
  fi
  export DEBIAN_FRONTEND=noninteractive
  command -v debootstrap >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; }
  echo "making a Debian-unstable root at $r for CPython 3.14 and 3.15"
  mkdir -p "$(dirname "$r")"
  if [ ! -x "$r/usr/bin/apt-get" ]; then
    rm -rf "$r.tmp"
    debootstrap --variant=minbase sid "$r.tmp" http://deb.debian.org/debian >"$r.log" 2>&1 &&
      mv "$r.tmp" "$r" || { echo "error: could not make $r (see $r.log)" >&2; return 1; }
  fi
  # the archive served here may be a snapshot older than its Valid-Until
  # shellcheck disable=SC2086
  { chroot "$r" apt-get -o Acquire::Check-Valid-Until=false update -qq && chroot "$r" apt-get install -y -qq \
      --no-install-recommends $LOOPSCOPE_SID_PACKAGES && chroot "$r" apt-get clean; } \
    >>"$r.log" 2>&1 || { echo "error: could not install into $r (see $r.log)" >&2; return 1; }
  echo "$LOOPSCOPE_SID_PACKAGES" >"$r/.loopscope-packages"
}
