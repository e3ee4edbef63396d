/*
 * meta.h -- the keys of a trace's meta table, reading it, and the
 * recorder's identity in it.
 *
 * Every meta key any code reads or writes is named here, once, as
 * LS_META_<KEY> (the key in capitals); its meaning is tracer/SCHEMA.md's.
 * In SQL text the constant goes in by string-literal concatenation:
 * "SELECT value FROM meta WHERE key = '" LS_META_END_NS "'".
 *
 * The recorder writes meta recorder_pid and recorder_start (the start time
 * of its process, field 22 of /proc/PID/stat) so that a reader can tell a
 * trace still being recorded from one whose recorder is gone (cut short).
 * Both sides use these functions on a raw connection.
 */
#ifndef LS_MODEL_META_H
#define LS_MODEL_META_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- how it was recorded (written when the recording starts) */
/* e.g. "loopscope 0.1.0" */
#define LS_META_TOOL "tool"
/* the schema version (the same as PRAGMA user_version) */
#define LS_META_SCHEMA_VERSION "schema_version"
/* the recorder's pid: while that process lives, the recording is in progress */
#define LS_META_RECORDER_PID "recorder_pid"
/* the recorder's start time (field 22 of /proc/PID/stat): a reused pid does not count */
#define LS_META_RECORDER_START "recorder_start"
/* uname nodename */
#define LS_META_HOST "host"
/* uname sysname + release */
#define LS_META_KERNEL "kernel"
/* the clock of every time: CLOCK_MONOTONIC */
#define LS_META_CLOCK "clock"
/* the target's pid */
#define LS_META_TARGET_PID "target_pid"
/* the file the probes were attached in */
#define LS_META_TARGET_BINARY "target_binary"
/* the target's command line */
#define LS_META_TARGET_CMDLINE "target_cmdline"
/* the `loopscope record ...` arguments */
#define LS_META_RECORDER_CMDLINE "recorder_cmdline"
/* batched or unbatched (--no-batch) for a libevl process; generic for the generic loop mode */
#define LS_META_MODE "mode"
/* what the target runs on, e.g. CPython 3.11.2, Node.js v20.20.2, native */
#define LS_META_RUNTIME "runtime"
/* generic mode: which syscalls count as the loop's wait: epoll or all */
#define LS_META_WAIT_CALLS "wait_calls"
/* generic mode: how the wait calls were seen: tracepoint or raw */
#define LS_META_WAIT_HOOK "wait_hook"
/* generic mode: the length of the loop_windows windows */
#define LS_META_WINDOW_NS "window_ns"
/* ring buffer size */
#define LS_META_RINGBUF_KB "ringbuf_kb"
/* on, or off (--no-blocking) */
#define LS_META_BLOCKING_DETECTION "blocking_detection"
/* on (--syscalls: every syscall of the loop threads timed) or off */
#define LS_META_SYSCALLS "syscalls"
/* only blocking episodes at least this long are stored */
#define LS_META_BLOCK_THRESHOLD_NS "block_threshold_ns"
/* monotonic start of the recording */
#define LS_META_START_NS "start_ns"
/* wall clock start, ISO 8601 */
#define LS_META_START_UTC "start_utc"
/* --max-size in bytes, when given */
#define LS_META_MAX_SIZE "max_size"
/* --backlog in bytes, when the recorder had a backlog */
#define LS_META_BACKLOG_LIMIT "backlog_limit"

/* ---- how it ended, and what the kernel and the recorder counted */
/* monotonic end of the recording (absent: cut short) */
#define LS_META_END_NS "end_ns"
/* wall clock end, ISO 8601 */
#define LS_META_END_UTC "end_utc"
/* end_ns - start_ns */
#define LS_META_DURATION_NS "duration_ns"
/* e.g. target exited, duration reached, max size reached */
#define LS_META_STOP_REASON "stop_reason"
/* --max-size reached: messages read and released but not stored */
#define LS_META_MESSAGES_AFTER_CAP "messages_after_cap"
/* batch messages delivered by the kernel */
#define LS_META_BATCHES "batches"
/* of those, batches the loop kept for the recorder to read from its memory */
#define LS_META_BATCHES_KEPT "batches_kept"
/* with a backlog: messages that waited in it before they were stored */
#define LS_META_BACKLOG_MESSAGES "backlog_messages"
/* with a backlog: the most message bytes it held at once */
#define LS_META_BACKLOG_PEAK "backlog_peak"
/* lifecycle records the recorder accepted and stored */
#define LS_META_RECORDS "records"
/* messages the ring buffer had no room for (BPF side): non-zero means lossy */
#define LS_META_DROPPED_MESSAGES "dropped_messages"
/* the payload bytes of those messages */
#define LS_META_DROPPED_BYTES "dropped_bytes"
/* the record counts the target reported for those lost batches: its word */
#define LS_META_DROPPED_EVENTS_CLAIMED "dropped_events_claimed"
/* older traces' name of dropped_events_claimed */
#define LS_META_DROPPED_EVENTS "dropped_events"
/* records the recorder refused as malformed */
#define LS_META_REJECTED_RECORDS "rejected_records"
/* messages of loops beyond the 1024th loop id */
#define LS_META_REJECTED_MESSAGES "rejected_messages"
/* tasks created while the recorder's live-task table was full: no task_stats */
#define LS_META_UNTRACKED_TASKS "untracked_tasks"
/* loops whose task snapshot could not be requested */
#define LS_META_SNAPSHOT_REQUEST_FAILURES "snapshot_request_failures"
/* rows of blocking the recorder stored */
#define LS_META_BLOCKING_EPISODES "blocking_episodes"
/* blocking episodes the BPF side could not keep open until they ended */
#define LS_META_LOST_EPISODES "lost_episodes"
/* loop threads seen running while taken for switched out: a switch onto
 * a CPU the scheduler's tracepoint did not show, accounted when found */
#define LS_META_UNSEEN_SWITCHES "unseen_switches"
/* runs of the recorder's BPF programs the kernel skipped (recursion_misses) */
#define LS_META_MISSED_RUNS "missed_runs"
/* --priority: idle, batch or normal */
#define LS_META_RECORDER_PRIORITY "recorder_priority"
/* with idle: how many times its watchdog raised it */
#define LS_META_PRIORITY_RAISES "priority_raises"
/* generic mode: loop threads found outside their wait call (asleep, or
 * in a CPU sample) while taken for inside it (its return was not seen) */
#define LS_META_STALE_WAITS "stale_waits"
/* generic mode: wait calls of threads beyond the 1024 loop threads kept */
#define LS_META_UNTRACKED_WAIT_CALLS "untracked_wait_calls"
/* batches whose memory could not be read, or too long for the buffer */
#define LS_META_READ_ERRORS "read_errors"
/* records the target's loops say they dropped: its word */
#define LS_META_LOOP_LOST_RECORDS_CLAIMED "loop_lost_records_claimed"
/* generic mode, a JIT runtime: how JIT frames are named (may be absent) */
#define LS_META_JIT_SYMBOLS "jit_symbols"
/* generic mode, a CPython target: where the asyncio task lifecycle comes
 * from ("census every N ms", or "none": --no-tasks, not CPython) */
#define LS_META_TASK_SOURCE "task_source"
/* and how many censuses were read, their mean cost, how many were cut */
#define LS_META_CENSUSES "censuses"
/* the longest time between two censuses (ns): the resolution the
 * lifecycle had at its worst (the recorder's CPU share decides it) */
#define LS_META_CENSUS_MAX_GAP_NS "census_max_gap_ns"

/* ---- a flight recorder's trace (--flight-recorder) */
/* what fired */
#define LS_META_TRIGGER "trigger"
/* when it happened */
#define LS_META_TRIGGER_NS "trigger_ns"
/* when the recorder saw it */
#define LS_META_TRIGGER_DETECTED_NS "trigger_detected_ns"
/* triggers that fired into this file */
#define LS_META_FLIGHT_TRIGGERS "flight_triggers"
/* the window kept before the trigger */
#define LS_META_FLIGHT_WINDOW_NS "flight_window_ns"
/* the tail kept after the trigger */
#define LS_META_FLIGHT_TAIL_NS "flight_tail_ns"
/* the start of the span the file covers (= start_ns) */
#define LS_META_FLIGHT_WINDOW_START_NS "flight_window_start_ns"
/* the end of the span the file covers (= end_ns) */
#define LS_META_FLIGHT_WINDOW_END_NS "flight_window_end_ns"
/* messages evicted before their window ended (--flight-memory full) */
#define LS_META_FLIGHT_EVICTED_EARLY "flight_evicted_early"
/* tasks beyond the flight recorder's task map */
#define LS_META_FLIGHT_UNTRACKED_TASKS "flight_untracked_tasks"

/* ---- a process group's (record -p PID,PID..., --children, --cgroup, --comm) */
/* processes recorded (rows of the processes table that were attached) */
#define LS_META_PROCESSES "processes"
/* processes the selection matched that were not recorded: gone before they
 * were attached, not ours to read, past the group's 64 */
#define LS_META_PROCESSES_UNRECORDED "processes_unrecorded"

/* ---- written by the derivation (model/derive.c) */
/* the derived tables' definitions the derived rows follow; absent until derived */
#define LS_META_MODEL_VERSION "model_version"
/* the end time the derivation used: end_ns, or a cut-short trace's last time */
#define LS_META_DERIVED_END_NS "derived_end_ns"
/* late_timers keeps sleeps fired at least this late */
#define LS_META_LATE_TIMER_FLOOR_NS "late_timer_floor_ns"

/* meta value of key as an integer; dflt when absent, empty, not a whole
 * number, or out of range. */
int64_t ls_db_meta_int(sqlite3 *db, const char *key, int64_t dflt);

/* Process pid's state letter (field 3) and start time (field 22, clock
 * ticks since boot) from /proc/PID/stat; pid 0 is this process.  False if
 * it cannot be read (gone, or not ours to see). */
bool ls_proc_stat(int pid, char *state, unsigned long long *start);

/* The trace's recorder still runs: meta recorder_pid names a live process
 * (not a zombie: killed, not yet reaped) that started at recorder_start,
 * so a reused pid does not count. */
bool ls_recorder_alive(sqlite3 *db);

#endif
