#!/usr/bin/env bash
# same_rows.sh -- do two builds' recorders write the same rows for the same
# program?  For a change to the recorder that must not change what it
# stores (issue 33's pipeline), run before and after:
#
#     tests/bench/same_rows.sh OLD_BUILD NEW_BUILD [RUNS]
#
# Each libevl example with a fixed task structure (lifecycle, ordering on
# the virtual clock, deadlock) is recorded RUNS times (default 3) by each
# build's `loopscope record -- CMD` (the command started by the recorder,
# so the trace holds the whole run), always the same binary, so the two
# recorders see the same program: NEW's, or $EXAMPLES's (a build's
# examples/: the old libevl, to compare the recorders alone).  Each trace
# is reduced to what does
# not depend on when or where it ran -- times, addresses, pids, loop ids
# and how many times the loop polled are left out; a task is its id
# (libevl numbers them 1, 2 ... in a run) -- and the reductions are
# compared: prints one line per program and build with the reductions'
# hashes, then SAME when both builds wrote a reduction the other did too,
# or DIFFERENT (with the diff of their first runs).  Needs root; exit 0
# when every program is the same.
set -euo pipefail
old=$(realpath "$1") new=$(realpath "$2") runs=${3:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ext=$new/model/loopscope_events.so
examples=$(realpath "${EXAMPLES:-$new/examples}")

reduce() { # trace
  sqlite3 -batch "$1" <<EOF
.load $ext
.mode list
SELECT 'meta', key FROM meta ORDER BY key;
SELECT 'loop', COUNT(*) FROM loops;
SELECT 'task', id, parent_id, name, function, preexisting, final_state, error, leak
  FROM tasks ORDER BY id;
SELECT 'event', task_id, kind, reason FROM events WHERE task_id IS NOT NULL ORDER BY rowid;
SELECT 'loop events', kind, COUNT(*) > 0 FROM events WHERE task_id IS NULL GROUP BY kind;
SELECT 'blocking', task_id, kind, syscall FROM blocking ORDER BY start_ns;
SELECT 'stats', task_id, resumes, wakes, blocking FROM task_stats ORDER BY task_id;
SELECT 'transition', from_node, to_node, count FROM transitions ORDER BY 2, 3;
SELECT 'counted', key, value FROM meta WHERE key IN ('records', 'rejected_records',
  'rejected_messages', 'untracked_tasks', 'blocking_episodes', 'dropped_messages',
  'mode', 'runtime', 'stop_reason') ORDER BY key;
EOF
}

status=0
# (pipeline is left out: its producer, consumer and timeout race on the
# real clock, so no two runs of one build write the same rows.)
for prog in "lifecycle" "ordering" "deadlock --seconds 1"; do
  name=${prog%% *}
  for b in old new; do
    dir=${!b}
    : >"$tmp/$name.$b.hashes"
    for i in $(seq "$runs"); do
      db=$tmp/$name.$b.$i.db
      # shellcheck disable=SC2086
      "$dir/viewer/loopscope" record -q -o "$db" -- "$examples/"$prog >/dev/null 2>&1 || true
      reduce "$db" >"$tmp/$name.$b.$i.txt"
      sha256sum <"$tmp/$name.$b.$i.txt" | cut -c1-16 >>"$tmp/$name.$b.hashes"
    done
    echo "$name $b: $(sort -u "$tmp/$name.$b.hashes" | tr '\n' ' ')"
  done
  common=$(sort -u "$tmp/$name.old.hashes" | comm -12 - <(sort -u "$tmp/$name.new.hashes") | head -1)
  if [ -n "$common" ]; then
    echo "$name: SAME ($common in both; $(wc -l <"$tmp/$name.new.1.txt") rows a trace)"
  else
    echo "$name: DIFFERENT"
    diff "$tmp/$name.old.1.txt" "$tmp/$name.new.1.txt" | head -20 || true
    status=1
  fi
done
exit $status
