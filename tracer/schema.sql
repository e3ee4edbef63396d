-- schema.sql -- the loopscope trace database; its version is the user_version below (the one place it is written).
-- One file per recording; tracer/SCHEMA.md documents every table.
-- Times are CLOCK_MONOTONIC nanoseconds (the clock of bpf_ktime_get_ns).
-- Indexes are created after capture (see INDEXES below), not here.
PRAGMA user_version = 4;
PRAGMA application_id = 1280266064;  -- 'LSTP'

CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;

CREATE TABLE loops(
  id INTEGER PRIMARY KEY,       -- libevl loop id (process-unique)
  pid INTEGER NOT NULL,
  tid INTEGER NOT NULL,         -- thread that runs it
  started_ns INTEGER,           -- loop_start, or first event seen
  stopped_ns INTEGER            -- loop_stop; NULL if still running at the end
);

-- A process group's recording (record -p PID,PID..., --children, --cgroup,
-- --comm): a row per process recorded, in the order they were attached (a
-- process that execs is attached again: a second row).  Each process's
-- loop, task and stack ids are its own plus id << 40, so that two processes'
-- never meet; loops.pid says whose a loop is.  A single process's trace has
-- no rows (added in schema 4 without a new version: readers look for it).
CREATE TABLE processes(
  id INTEGER PRIMARY KEY,       -- 0, 1, ...: the id range of its loops, tasks and stacks
  pid INTEGER NOT NULL,
  parent_pid INTEGER,           -- the member it was forked from; NULL if selected
  binary TEXT,                  -- its executable
  mode TEXT,                    -- libevl or generic
  runtime TEXT,                 -- meta runtime's words, for this process
  attached_ns INTEGER,          -- when recording it began
  ended_ns INTEGER,             -- when it ended; NULL while it was still recorded at the end
  end_reason TEXT               -- why: target exited, exec'd, recording stopped ...
);

CREATE TABLE tasks(
  id INTEGER PRIMARY KEY,       -- libevl task id (process-unique)
  loop_id INTEGER NOT NULL,
  parent_id INTEGER,            -- task that spawned it; NULL for none
  name TEXT NOT NULL,
  function TEXT,                -- symbol of the task function
  function_addr INTEGER,
  created_ns INTEGER,           -- task_create; attach time if preexisting
  preexisting INTEGER NOT NULL DEFAULT 0, -- created before the recording began
  ended_ns INTEGER,             -- task_finish; NULL if still pending
  final_state INTEGER,          -- states.id: 4 finished, 5 failed, 6 cancelled
  error INTEGER,                -- negative errno-style code, 0 if none
  leak INTEGER                  -- leak_kinds.id of its task_leak verdict, if any
);

-- task_stats, iteration_hist and the other derived tables: model/derived.sql
-- (created with this schema, filled by the one replay of task states).

-- Events: the virtual table `events` (columns ts_ns, loop_id, task_id, kind,
-- reason, arg0, arg1; rowid = 1, 2, ... in store order) over chunks of up
-- to 4096 events (model/evchunk.h has the encoding).  Readers other than
-- loopscope load the module from loopscope_events.so (tracer/SCHEMA.md).
CREATE TABLE event_chunks(
  id INTEGER PRIMARY KEY,       -- rowid of its first event
  n INTEGER NOT NULL,           -- events in it
  min_ts INTEGER NOT NULL,      -- its earliest and latest ts_ns
  max_ts INTEGER NOT NULL,
  run_max INTEGER NOT NULL      -- the latest ts_ns of this chunk and all before it
);
CREATE INDEX event_chunks_run ON event_chunks(run_max);
CREATE TABLE event_chunk_data(
  id INTEGER PRIMARY KEY,       -- event_chunks.id
  data BLOB NOT NULL            -- the events, encoded
);
CREATE TABLE event_chunk_tasks(
  task_id INTEGER NOT NULL,     -- a task with events in the chunk
  chunk_id INTEGER NOT NULL,    -- event_chunks.id
  min_ts INTEGER NOT NULL,      -- the earliest and latest ts_ns of its events there
  max_ts INTEGER NOT NULL,
  PRIMARY KEY(task_id, chunk_id)
) WITHOUT ROWID;
CREATE INDEX event_chunk_tasks_ts ON event_chunk_tasks(task_id, min_ts);
CREATE VIRTUAL TABLE events USING loopscope_events;

-- Blocking episodes on loop threads and their stacks.
CREATE TABLE blocking(
  id INTEGER PRIMARY KEY,
  loop_id INTEGER NOT NULL,
  task_id INTEGER,              -- running task; NULL if a plain callback
  start_ns INTEGER NOT NULL,    -- off-CPU: switch-out; on-CPU: step start
  dur_ns INTEGER NOT NULL,      -- how long the loop was held
  kind INTEGER NOT NULL,        -- blocking_kinds.id: 1 off-CPU, 2 on-CPU
  syscall INTEGER,              -- syscalls.nr it slept in; NULL if none
  stack_id INTEGER,             -- stacks.id: where the application was
  delayed_tasks INTEGER NOT NULL DEFAULT 0 -- rows in blocking_victims
);
CREATE TABLE blocking_victims(
  blocking_id INTEGER NOT NULL,
  task_id INTEGER NOT NULL,     -- a task the episode delayed
  ready_ns INTEGER NOT NULL,    -- when it became ready (woken, or its timer came due)
  ran_ns INTEGER NOT NULL,      -- when it ran
  delay_ns INTEGER NOT NULL,    -- ran_ns - max(ready_ns, episode start)
  cause INTEGER NOT NULL,       -- 1 was ready, 2 its timer came due, 3 its fd
                                -- was ready for the first poll after it
  PRIMARY KEY(blocking_id, task_id)
) WITHOUT ROWID;
CREATE TABLE stacks(id INTEGER PRIMARY KEY, depth INTEGER NOT NULL);
CREATE TABLE frames(
  stack_id INTEGER NOT NULL,
  depth INTEGER NOT NULL,       -- 0 = innermost
  address INTEGER NOT NULL,
  function TEXT,
  file TEXT,
  line INTEGER,
  module TEXT,
  PRIMARY KEY(stack_id, depth)
) WITHOUT ROWID;
-- Asyncio traces: the await chain of a task each time a census saw it
-- park (one row per task_suspend event of the census).
CREATE TABLE await_stacks(
  task_id INTEGER NOT NULL,
  ts_ns INTEGER NOT NULL,       -- its task_suspend event's time
  stack_id INTEGER NOT NULL,    -- stacks.id: innermost coroutine frame at depth 0
  PRIMARY KEY(task_id, ts_ns)
) WITHOUT ROWID;
CREATE TABLE syscalls(nr INTEGER PRIMARY KEY, name TEXT NOT NULL);
-- With `record --syscalls`: time in each syscall per loop thread.
CREATE TABLE syscall_stats(
  loop_id INTEGER,
  tid INTEGER NOT NULL,
  nr INTEGER NOT NULL,          -- syscalls.nr
  count INTEGER NOT NULL,
  total_ns INTEGER NOT NULL,
  max_ns INTEGER NOT NULL,
  PRIMARY KEY(tid, nr)
) WITHOUT ROWID;
-- Generic loop mode (a process without libevl, meta.mode = 'generic'): a
-- loop thread's iterations (wait call to wait call), summed per window.
CREATE TABLE loop_windows(
  loop_id INTEGER NOT NULL,     -- loops.id (the thread id in generic mode)
  start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL,
  iterations INTEGER NOT NULL,  -- wait calls that returned in the window
  wait_ns INTEGER NOT NULL,     -- time inside the wait call: idle
  busy_ns INTEGER NOT NULL,     -- time from a wait's return to the next wait
  max_busy_ns INTEGER NOT NULL, -- the longest such stretch (iteration latency)
  PRIMARY KEY(loop_id, start_ns)
) WITHOUT ROWID;
CREATE TABLE blocking_kinds(id INTEGER PRIMARY KEY, name TEXT NOT NULL);

-- Names for the integer codes, so the stock sqlite3 shell reads well.
CREATE TABLE event_kinds(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE states(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE suspend_reasons(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE waker_kinds(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE leak_kinds(id INTEGER PRIMARY KEY, name TEXT NOT NULL);

-- (filled by the recorder from loop/include/evl-probes.h's X-macro lists)

-- Events with names instead of codes.
CREATE VIEW events_named AS
  SELECT e.ts_ns, e.loop_id, e.task_id, t.name AS task, k.name AS kind,
         CASE k.name
           WHEN 'task_suspend' THEN (SELECT name FROM suspend_reasons WHERE id = e.reason)
           WHEN 'task_wake' THEN coalesce((SELECT name FROM waker_kinds WHERE id = e.reason),
                                           'unknown')
           WHEN 'task_finish' THEN (SELECT name FROM states WHERE id = e.reason)
           WHEN 'task_leak' THEN (SELECT name FROM leak_kinds WHERE id = e.reason)
           ELSE e.reason END AS reason,
         e.arg0, e.arg1
  FROM events e JOIN event_kinds k ON k.id = e.kind
  LEFT JOIN tasks t ON t.id = e.task_id;

-- Every sleep whose timer fired: its deadline and how late it fired
-- (loop clock; meaningless for loops on the virtual clock).
CREATE VIEW timer_lateness AS
  SELECT w.loop_id, w.task_id, s.arg0 AS deadline_ns, w.ts_ns AS fired_ns,
         w.ts_ns - s.arg0 AS late_ns
  FROM events w JOIN events s ON s.rowid = (
      SELECT p.rowid FROM events p WHERE p.task_id = w.task_id
        AND p.kind = (SELECT id FROM event_kinds WHERE name = 'task_suspend')
        AND p.ts_ns <= w.ts_ns ORDER BY p.ts_ns DESC, p.rowid DESC LIMIT 1)
  WHERE w.kind = (SELECT id FROM event_kinds WHERE name = 'task_wake')
    AND w.reason = (SELECT id FROM waker_kinds WHERE name = 'timer')
    AND s.reason = (SELECT id FROM suspend_reasons WHERE name = 'sleep');

-- INDEXES (made by model/derive.c when the trace is derived): on the
-- derived tables only (model/derived.sql); events needs none (the chunks
-- are found by rowid, time and event_chunk_tasks).
