# tests/deps.sh -- sourced by tests/run.sh and examples/demo.sh: install the
# Debian packages loopscope needs, when some are missing (needs root).
LOOPSCOPE_PACKAGES="build-essential cmake pkg-config clang llvm libbpf-dev bpftool
  libelf-dev zlib1g-dev libdw-dev libsqlite3-dev sqlite3 libgraphviz-dev graphviz
  systemtap-sdt-dev libuv1-dev libev-dev bpftrace python3 chromium curl wrk
  iproute2 util-linux nodejs redis-server libprotobuf-c-dev protobuf-c-compiler
  protobuf-compiler python3-protobuf tmux libncurses-dev python3-uvloop strace valgrind"

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
