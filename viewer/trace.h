/*
 * trace.h -- opening a trace database for reading (schema: tracer/SCHEMA.md)
 * and small helpers every command shares.
 */
#ifndef LOOPSCOPE_TRACE_H
#define LOOPSCOPE_TRACE_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "meta.h"              /* LS_META_*: the keys ls_meta and the others read */
#include "ls_schema.h"         /* LS_SCHEMA_VERSION: the newest this reader knows */
#define LS_TRACE_APP_ID 1280266064   /* PRAGMA application_id, 'LSTP' */

typedef struct ls_trace {
    sqlite3 *db;
    const char *path;
    char *tmp_path;           /* a completed private copy (read-only trace), or NULL */
    bool in_progress;         /* its recorder still runs: no derived tables yet */
    bool completed;           /* derived by this open (ls_trace_complete) */
    bool cut_short;           /* the recording did not end cleanly (no meta end_ns) */
    int64_t cut_at_ns;        /* then: its last time, from the start */
} ls_trace;

/* Complete t if it lacks the derived tables (complete.c): derived in place
 * or, for a file this user cannot write, in a private copy (*tmp_path, to
 * unlink).  Returns the path to read (t->path or the copy), or NULL after
 * printing an error. */
const char *ls_trace_complete(ls_trace *t, char **tmp_path);

/* Open path read-only and check it is a loopscope trace of a schema this
 * reader knows; complete it on first read (ls_trace_complete) and say in
 * one line on stderr when its recording was cut short or is in progress.  On failure prints one "error: ..." line and returns NULL:
 * missing file, not SQLite, foreign SQLite file, newer/older schema,
 * truncated or damaged. */
ls_trace *ls_trace_open(const char *path);
void ls_trace_close(ls_trace *t);

/* Prepare sql; on error prints "error: ..." and returns NULL. */
sqlite3_stmt *ls_prepare(ls_trace *t, const char *sql);
/* Step st to its end; false (after printing an error) if SQLite failed. */
bool ls_step_ok(ls_trace *t, sqlite3_stmt *st, int rc);

/* Times in a trace may be anything (INT64_MIN, going backwards).  The
 * commands clamp every time they read to +-LS_TS_LIMIT ns (36 years, far
 * beyond a real recording), so that sums and differences of a few of them
 * cannot overflow; SQL arithmetic turns an overflow into a REAL, which
 * sqlite3_column_int64 saturates. */
#define LS_TS_LIMIT ((int64_t)1 << 60)
static inline int64_t ls_ts(int64_t v)
{
    return v < -LS_TS_LIMIT ? -LS_TS_LIMIT : v > LS_TS_LIMIT ? LS_TS_LIMIT : v;
}
/* Column i of st as a clamped time. */
int64_t ls_col_ts(sqlite3_stmt *st, int i);
/* Column i of st as text; NULL when it is NULL. */
const char *ls_col_text(sqlite3_stmt *st, int i);
/* Column i of st is NULL. */
bool ls_col_null(sqlite3_stmt *st, int i);
/* A meta value as a clamped time, dflt when absent or not a number. */
int64_t ls_meta_ts(ls_trace *t, const char *key, int64_t dflt);

/* What the recording lost, from meta (tracer/SCHEMA.md); -1 for a counter
 * that is absent (an older recorder) or not a count.  messages, bytes,
 * rejected, read_errors and lost_episodes are counted by the recorder or
 * the kernel; claimed is what the target reported for the lost batches
 * (dropped_events_claimed, or the older dropped_events), and loop_lost
 * what its loops dropped themselves, both unverified. */
typedef struct ls_drops {
    int64_t messages;         /* dropped_messages: ring-buffer messages lost */
    int64_t bytes;            /* dropped_bytes: payload bytes in them */
    int64_t rejected;         /* rejected_records: malformed records refused */
    int64_t read_errors;      /* read_errors: batches that could not be read */
    int64_t claimed;          /* events the target claims were in the lost batches */
    int64_t lost_episodes;    /* lost_episodes: blocking episodes not kept */
    int64_t loop_lost;        /* loop_lost_records_claimed: records the target's
                               * loops say they dropped, their buffers all held */
} ls_drops;
void ls_read_drops(ls_trace *t, ls_drops *d);
/* Anything lost or refused (a lossy trace). */
bool ls_drops_lossy(const ls_drops *d);

/* --pid PID (every command, viewer/options.c): 0, or the process of a
 * process group's trace that ls_trace_open shows alone -- the trace seen
 * through temporary views of its tables that keep that process's rows
 * (its loops, and what their ids and its tasks' ids reach), so every
 * command reads it as it reads a trace of that process. */
extern int64_t ls_trace_pid;
/* The trace holds more than one process (a process group's: tracer/
 * SCHEMA.md, "processes"): labels name the process with the thread. */
bool ls_trace_group(ls_trace *t);

/* meta mode = 'generic' (tracer/SCHEMA.md): a process not built on libevl;
 * its loops are threads, with iteration windows and a histogram, and its
 * stacks hold runtime frames (Python, JIT) rather than libevl's.  Whether
 * it has a task lifecycle is ls_has_lifecycle's question, not this one. */
bool ls_is_generic(ls_trace *t);

/* Where a trace's task lifecycle (task rows with task_create .. task_leak
 * events, task_stats, transitions) comes from:
 *   LS_LIFECYCLE_PROBES  libevl's probes (meta mode batched or unbatched):
 *                        every step, with who woke a task;
 *   LS_LIFECYCLE_CENSUS  a generic trace whose meta task_source starts with
 *                        "census" (an unmodified CPython's asyncio tasks,
 *                        read every N ms: tracer/decode_asyncio.c): states
 *                        as the censuses saw them, stamped with the census
 *                        times, a wake's waker unknown (waker kind 0);
 *   LS_LIFECYCLE_NONE    any other generic trace (task_source "none" or
 *                        absent): no lifecycle, tasks rows only for the
 *                        asyncio tasks named in blocking episodes. */
typedef enum { LS_LIFECYCLE_NONE, LS_LIFECYCLE_PROBES, LS_LIFECYCLE_CENSUS } ls_lifecycle;
ls_lifecycle ls_lifecycle_source(ls_trace *t);
/* The trace has a task lifecycle (probes or census): every view of tasks
 * (tasks, timeline lanes, graph --kind tasks|lifecycle, lint's task rules,
 * export's task tracks, diff's task and leak tables) reads it. */
bool ls_has_lifecycle(ls_trace *t);
/* For a census lifecycle, a phrase saying where it comes from, e.g.
 * "asyncio task lifecycle from a census every 10 ms" (the meta value,
 * escaped by the caller as any trace string); malloc'd, NULL otherwise. */
char *ls_lifecycle_text(ls_trace *t);
/* A table (or view) of that name exists: older traces lack the newer ones. */
bool ls_has_table(ls_trace *t, const char *name);

/* The first column of the first row of sql as an integer; 0 when there
 * is no row (an error is printed by ls_prepare if sql fails to prepare). */
int64_t ls_query_int(ls_trace *t, const char *sql);
/* A meta value (malloc'd), or NULL. */
char *ls_meta(ls_trace *t, const char *key);
int64_t ls_meta_int(ls_trace *t, const char *key, int64_t dflt);

/* Create the temporary view app_frames(stack_id, depth, function, file,
 * line, module): for each stack, its frames in the application, i.e. not
 * in a system library, the vDSO, or libevl itself (evl__ functions).  The
 * frame with the smallest depth is where the application called what
 * blocked: its "site".  Returns false after printing an error. */
bool ls_create_app_frames(ls_trace *t);
/* A task name's pattern, its runs of digits as '*' ("conn-17" -> "conn-*"):
 * how graph --kind tasks and diff group tasks of one kind.  malloc'd, NULL
 * when out of memory. */
char *ls_name_pattern(const char *name);
/* "dir/file.c" from "/long/path/dir/file.c" (the last two components). */
const char *ls_short_path(const char *path);

/* Parse a duration like "250ms", "1.5s", "20us", "300ns", "2" (seconds);
 * -1 if malformed. */
int64_t ls_parse_duration(const char *s);

/* ls_error: "error: ..." on stderr, one line; returns 1 (model/error.h). */

#endif
