#!/usr/bin/env bash
# make_fixtures.sh BUILD_DIR -- record the example programs and store the
# traces as SQL dumps in tests/viewer/fixtures/ (needs root).  The viewer's
# golden tests rebuild databases from these dumps, so they are stable and
# reviewable; re-record only when the schema or the recorder changes, then
# refresh the golden files (run_golden.py --update) and review the diff.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
ls=$build/viewer/loopscope
ex=$build/examples
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; [ -n "${srv:-}" ] && kill "$srv" 2>/dev/null || true' EXIT

dump() { # db name
  { sqlite3 "$1" .dump
    echo "PRAGMA user_version = $(sqlite3 "$1" 'PRAGMA user_version');"
    echo "PRAGMA application_id = $(sqlite3 "$1" 'PRAGMA application_id');"
  } > "$here/fixtures/$2.sql"
  echo "fixtures/$2.sql: $(sqlite3 "$1" 'SELECT count(*) FROM events') events"
}

# 1. every lifecycle step once
"$ls" record -q -o "$tmp/lifecycle.db" -- "$ex/lifecycle" >/dev/null
dump "$tmp/lifecycle.db" lifecycle

# 2. two loops on two threads
"$ls" record -q -o "$tmp/ticker.db" -- "$ex/ticker" --seconds 0.3 --threads 2 --tick-ms 20 >/dev/null
dump "$tmp/ticker.db" ticker

# 3. the blocking server, each bug once, recorded by pid
(cd "$tmp" && exec "$ex/blocking_server" --requests 5 > "$tmp/srv.out") &
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
dump "$tmp/blocking.db" blocking
