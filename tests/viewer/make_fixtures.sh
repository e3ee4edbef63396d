#!/usr/bin/env bash
# make_fixtures.sh BUILD_DIR [NAME...] -- record the example programs and store the
# traces as SQL dumps in tests/viewer/fixtures/ (needs root).  The viewer's
# golden tests rebuild databases from these dumps, so they are stable and
# reviewable; re-record only when the schema or the recorder changes, then
# refresh the golden files (run_golden.py --update) and review the diff.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
shift || true
only=("$@")                   # fixture names to rewrite; default all
here=$(cd "$(dirname "$0")" && pwd)
ls=$build/viewer/loopscope
ex=$build/examples
tmp=$(mktemp -d)
# The blocking server writes and fsyncs in its own directory: on a disk (the
# build directory), not a tmpfs where fsync returns at once.
scratch=$(mktemp -d -p "$build" fixture-XXXXXX)
trap 'rm -rf "$tmp" "$scratch"; [ -n "${srv:-}" ] && kill "$srv" 2>/dev/null || true' EXIT

dump() { # db name
  { sqlite3 "$1" .dump
    echo "PRAGMA user_version = $(sqlite3 "$1" 'PRAGMA user_version');"
    echo "PRAGMA application_id = $(sqlite3 "$1" 'PRAGMA application_id');"
  } > "$here/fixtures/$2.sql"
  echo "fixtures/$2.sql: $(sqlite3 "$1" 'SELECT count(*) FROM events') events"
}

# 1. every lifecycle step once
"$ls" record -q -o "$tmp/lifecycle.db" -- "$ex/lifecycle" >/dev/null

# 2. two loops on two threads
"$ls" record -q -o "$tmp/ticker.db" -- "$ex/ticker" --seconds 0.3 --threads 2 --tick-ms 20 >/dev/null

# 3. the blocking server, each bug once, recorded by pid
(cd "$scratch" && exec "$ex/blocking_server" --requests 5 > "$tmp/srv.out") &
srv=$!
for _ in $(seq 50); do grep -q port "$tmp/srv.out" 2>/dev/null && break; sleep 0.1; done
pid=$(awk '/^pid/{print $2}' "$tmp/srv.out"); port=$(awk '/^port/{print $2}' "$tmp/srv.out")
"$ls" record -q -p "$pid" -o "$tmp/blocking.db" -t 5 &
rec=$!
sleep 1
for r in sleep pipe spin dns fsync; do
  python3 -c "import socket,sys; s=socket.create_connection(('127.0.0.1',$port)); s.sendall(b'$r\n'); s.recv(100)"
done
wait "$rec"
wait "$srv" || true
srv=
# Each bug must be in the fixture; a recording that lost one is not
# written (the goldens would silently lose it too).
need() { # what, SQL condition on blocking b / syscalls s
  local n
  n=$(sqlite3 "$tmp/blocking.db" "SELECT count(*) FROM blocking b LEFT JOIN syscalls s ON s.nr = b.syscall WHERE $2")
  if [ "$n" -eq 0 ]; then
    echo "make_fixtures.sh: the blocking recording has no $1 episode; fixtures unchanged" >&2
    exit 1
  fi
}
need "sleep (clock_nanosleep)" "s.name IN ('clock_nanosleep', 'nanosleep')"
need "pipe (read)" "s.name = 'read'"
need "fsync" "s.name IN ('fsync', 'fdatasync')"
need "on-CPU (spin)" "b.kind = 2"

# Only now, all or nothing (or the ones named after BUILD_DIR):
for f in lifecycle ticker blocking; do
  if [ ${#only[@]} -eq 0 ] || [[ " ${only[*]} " == *" $f "* ]]; then
    dump "$tmp/$f.db" "$f"
  fi
done
