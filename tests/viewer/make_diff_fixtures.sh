#!/usr/bin/env bash
# make_diff_fixtures.sh BUILD_DIR -- record the pair of traces the `diff`
# golden tests compare (needs root): examples/blocking_server with its
# blocking bugs (fixtures/diff_before.sql), then the same server with --good,
# the same work done without blocking the loop (fixtures/diff_after.sql),
# each driven with the same requests: every route twice.  Like
# make_fixtures.sh, the traces are stored as SQL dumps, recorded once: the
# goldens stay stable because the dumps do not change.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
ls=$build/viewer/loopscope
ex=$build/examples
tmp=$(mktemp -d)
# fsync on a disk (the build directory), not a tmpfs where it returns at once
scratch=$(mktemp -d -p "$build" fixture-XXXXXX)
trap 'rm -rf "$tmp" "$scratch"; [ -n "${srv:-}" ] && kill "$srv" 2>/dev/null || true' EXIT
routes="sleep pipe spin fsync dns sleep pipe spin fsync dns"

record() { # name [--good]
  local name=$1; shift
  (cd "$scratch" && exec "$ex/blocking_server" "$@" --requests 10 > "$tmp/srv.out") &
  srv=$!
  for _ in $(seq 50); do grep -q port "$tmp/srv.out" 2>/dev/null && break; sleep 0.1; done
  local pid port rec
  pid=$(awk '/^pid/{print $2}' "$tmp/srv.out"); port=$(awk '/^port/{print $2}' "$tmp/srv.out")
  "$ls" record -q -p "$pid" -o "$tmp/$name.db" -t 5 &
  rec=$!
  sleep 1
  python3 - "$port" $routes <<'PY'
import socket, sys, time
for r in sys.argv[2:]:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    s.sendall(r.encode() + b"\n")
    s.recv(100)
    s.close()
    time.sleep(0.05)
PY
  wait "$rec"
  wait "$srv" || true
  srv=
}

dump() { # db name
  { sqlite3 "$1" .dump
    echo "PRAGMA user_version = $(sqlite3 "$1" 'PRAGMA user_version');"
    echo "PRAGMA application_id = $(sqlite3 "$1" 'PRAGMA application_id');"
  } > "$here/fixtures/$2.sql"
  echo "fixtures/$2.sql: $(sqlite3 "$1" 'SELECT count(*) FROM events') events," \
       "$(sqlite3 "$1" 'SELECT count(*) FROM blocking') blocking episodes"
}

record diff_before
record diff_after --good
# The story must be in the pair: blocking before, none (or nearly) after.
nb=$(sqlite3 "$tmp/diff_before.db" "SELECT count(DISTINCT stack_id) FROM blocking")
na=$(sqlite3 "$tmp/diff_after.db" "SELECT count(*) FROM blocking WHERE dur_ns >= 20000000")
if [ "$nb" -lt 4 ] || [ "$na" -gt 0 ]; then
  echo "make_diff_fixtures.sh: before has $nb blocking sites, after $na long episodes; fixtures unchanged" >&2
  exit 1
fi
dump "$tmp/diff_before.db" diff_before
dump "$tmp/diff_after.db" diff_after
