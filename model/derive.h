/*
 * derive.h -- the derived tables of a trace (model/derived.sql, task_stats,
 * iteration_hist for libevl loops, blocking durations and victims), written
 * from the one replay (replay.h).
 *
 * One way in: ls_derive_all() empties everything derived and replays the
 * trace's events, read straight from their chunks (model/evchunk.h), in
 * one pass.  The recorder calls it when a recording ends, after detaching
 * (recording itself only stores events: the target's CPUs do not pay for
 * the replay while it runs); the viewer calls it for a trace whose
 * recording was cut short (no meta model_version: the recorder was killed)
 * or that an older loopscope wrote (an older model_version).  It leaves
 * meta model_version = LS_MODEL_VERSION, runs inside the caller's
 * transaction and writes only derived rows, indexes and meta keys:
 * deriving twice gives the same trace.
 */
#ifndef LS_MODEL_DERIVE_H
#define LS_MODEL_DERIVE_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "replay.h"

/* late_timers keeps sleeps fired at least this late (or the trace's
 * blocking threshold if lower; meta late_timer_floor_ns says which). */
#define LS_LATE_TIMER_FLOOR_NS 1000000

/* Derive a trace from its events (see above).  end_ns: when the
 * recording ended (meta end_ns, or for a cut-short trace the last time it
 * holds).  max_live: live tasks tracked at once (replay.h; the recorder's
 * LS_TASKS_MAX bounds its memory whatever the target did).  0, or -1
 * with a message in err. */
int ls_derive_all(sqlite3 *db, int64_t end_ns, size_t max_live, char *err, size_t errlen);

/* The last time a trace holds (events, blocking episodes' ends, windows),
 * or INT64_MIN if none: where a cut-short recording stopped. */
int64_t ls_derive_last_time(sqlite3 *db);

/* blocking_victims, from blocking (durations final) and the events
 * (victims.c).  SQLite's result code. */
int ls_derive_victims(struct sqlite3 *db);

#endif
