-- derived.sql -- the tables derived from events by the one replay of task
-- states (model/replay.h) over the stored events, written by the recorder
-- when it stops and, for a trace whose recording was cut short or that an
-- older loopscope wrote, by the viewer on first read (model/derive.h).
-- Deriving again gives the same rows: every table is emptied first.  meta model_version says which version of these
-- definitions the rows follow; the line below is its one home.
-- model_version 2

-- Per task (`loopscope tasks`): its time in each state, from the replay.
CREATE TABLE IF NOT EXISTS task_stats(
  task_id INTEGER PRIMARY KEY,
  busy_ns INTEGER NOT NULL,     -- running: task_run to its next suspend/finish
  scheduled_ns INTEGER NOT NULL,-- ready but waiting: create/wake to run
  idle_ns INTEGER NOT NULL,     -- suspended: suspend to wake
  resumes INTEGER NOT NULL,     -- steps (task_run events)
  wakes INTEGER NOT NULL,
  longest_step_ns INTEGER NOT NULL,
  blocking INTEGER NOT NULL,    -- blocking episodes in its steps
  blocked_ns INTEGER NOT NULL
);

-- Iteration latency (busy time of one iteration) over the whole recording,
-- per loop, in power-of-two buckets [lo_ns, hi_ns).  Generic loop mode: summed
-- by the BPF side (the replay leaves those rows alone); libevl loops: from
-- poll_exit to the next poll_enter, by the replay.
CREATE TABLE IF NOT EXISTS iteration_hist(
  loop_id INTEGER NOT NULL,
  lo_ns INTEGER NOT NULL,
  hi_ns INTEGER NOT NULL,
  count INTEGER NOT NULL,
  busy_ns INTEGER NOT NULL,     -- sum of the iterations' busy time
  PRIMARY KEY(loop_id, lo_ns)
) WITHOUT ROWID;

-- Lifecycle transitions, per loop: a task went from node from_node to node
-- to_node `count` times, after total_ns in from_node in all (the longest:
-- max_ns).  A node is the event that entered the state, as
-- 100 * event kind + detail: 300 created, 301 pre-existing (created before
-- the recording began), 400 running, 500 + suspend reason suspended,
-- 600 ready, 700 + final state finished/failed/cancelled, 900 leaked, and
-- to_node 0 is the end of the recording (no time: total_ns 0).
CREATE TABLE IF NOT EXISTS transitions(
  loop_id INTEGER NOT NULL,
  from_node INTEGER NOT NULL,
  to_node INTEGER NOT NULL,
  count INTEGER NOT NULL,
  total_ns INTEGER NOT NULL,
  max_ns INTEGER NOT NULL,
  PRIMARY KEY(loop_id, from_node, to_node)
) WITHOUT ROWID;
-- Their durations in buckets [lo_ns, hi_ns): powers of two split in 8.
CREATE TABLE IF NOT EXISTS transition_hist(
  loop_id INTEGER NOT NULL,
  from_node INTEGER NOT NULL,
  to_node INTEGER NOT NULL,
  lo_ns INTEGER NOT NULL,
  hi_ns INTEGER NOT NULL,
  count INTEGER NOT NULL,
  PRIMARY KEY(loop_id, from_node, to_node, lo_ns)
) WITHOUT ROWID;

-- The rare lifecycle facts that rules and graphs look up by task: a task's
-- suspends on a task or a gather (from its suspended span; arg0 the awaited
-- object), its self-wakes (woken by itself, not a yield; arg0 itself), cancel
-- requests and leak verdicts (rid: their rowid in events; NULL for the
-- others).  As the replay sees them: a pre-existing task's first span says
-- nothing.
CREATE TABLE IF NOT EXISTS task_marks(
  rid INTEGER,
  ts_ns INTEGER NOT NULL,
  task_id INTEGER NOT NULL,
  kind INTEGER NOT NULL,        -- event_kinds.id
  reason INTEGER,
  arg0 INTEGER
);
-- Per task, its longest slice: from a task_run to its next suspend or
-- finish, the time between two yields (other events on the way do not end
-- it; unended, it lasts to the end of its loop or of the recording).
CREATE TABLE IF NOT EXISTS task_slices(
  task_id INTEGER PRIMARY KEY,
  longest_ns INTEGER NOT NULL,
  longest_at_ns INTEGER NOT NULL  -- where it began
);
-- Sleeps whose timer fired at least meta late_timer_floor_ns after their
-- deadline (1 ms, or the blocking threshold if lower): a sleep span the
-- replay ended with a timer wake.  late_ns = fired_ns - deadline_ns,
-- saturated.
CREATE TABLE IF NOT EXISTS late_timers(
  task_id INTEGER NOT NULL,
  deadline_ns INTEGER NOT NULL,
  fired_ns INTEGER NOT NULL,
  late_ns INTEGER NOT NULL
);
