/*
 * derive.h -- the derived tables of a trace (model/derived.sql, task_stats,
 * iteration_hist for libevl loops, blocking durations and victims), written
 * from the one replay (replay.h).
 *
 * Two ways in, one result:
 *  - the recorder feeds its replay as it ingests, with ls_derive_ops()
 *    writing each task's task_stats row when the task is done, then calls
 *    ls_derive_finish() at the end;
 *  - a trace whose recording was cut short (no meta end_ns), or that an
 *    older loopscope wrote (meta model_version missing or older), is
 *    completed by ls_derive_all(): everything derived is emptied and
 *    replayed from the events table.
 * Both leave meta model_version = LS_MODEL_VERSION.  They run inside the
 * caller's transaction and write only derived rows, indexes and that meta
 * key: deriving twice gives the same trace.
 */
#ifndef LS_MODEL_DERIVE_H
#define LS_MODEL_DERIVE_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "replay.h"

typedef struct ls_derive ls_derive;

/* late_timers keeps sleeps fired at least this late (or the trace's
 * blocking threshold if lower; meta late_timer_floor_ns says which). */
#define LS_LATE_TIMER_FLOOR_NS 1000000

/* NULL (with a message in err) if a statement cannot be prepared. */
ls_derive *ls_derive_new(sqlite3 *db, char *err, size_t errlen);
void ls_derive_free(ls_derive *d);
/* Replay callbacks that store task_stats rows (ctx = d). */
ls_replay_ops ls_derive_ops(ls_derive *d);

/* After ls_replay_end(): the transitions, their histograms, libevl loops'
 * iteration_hist, then the SQL-derived parts (indexes, on-CPU episode
 * durations, blocking victims, per-task blocking) and model_version.
 * 0, or -1 with a message in err. */
int ls_derive_finish(ls_derive *d, ls_replay *r, char *err, size_t errlen);

/* Complete a trace from its events (see above).  end_ns: when the
 * recording ended (meta end_ns, or for a cut-short trace the last time it
 * holds).  0, or -1 with a message in err. */
int ls_derive_all(sqlite3 *db, int64_t end_ns, char *err, size_t errlen);

/* The last time a trace holds (events, blocking episodes' ends, windows),
 * or INT64_MIN if none: where a cut-short recording stopped. */
int64_t ls_derive_last_time(sqlite3 *db);

/* blocking_victims, from blocking (durations final) and the events
 * (victims.c).  SQLite's result code. */
int ls_derive_victims(struct sqlite3 *db);

#endif
