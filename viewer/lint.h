/*
 * lint.h -- what the parts of `loopscope lint` share: the rules, the
 * warning writer (text or JSON) and the SQL helpers.  cmd_lint.c is the
 * command and the rules on blocking, loop lag and drops; lint_tasks.c the
 * task lifecycle rules, from the derived tables and lint_pass.c's one
 * replay of the events (model/replay.h); lint_deadlock.c the deadlock rule,
 * from graph_waits.c's wait-for cycles.  Depends on viewer/trace.h,
 * viewer/output.h and (lint_deadlock.c) viewer/graph.h.
 */
#ifndef LOOPSCOPE_LINT_H
#define LOOPSCOPE_LINT_H

#include "output.h"
#include "trace.h"

#include <stdbool.h>
#include <stdint.h>

/* The rules, in output order; the index is the counter slot. */
enum { R_BLOCKING, R_LOOP_LAG, R_NEVER_YIELDS, R_LEAKED, R_LOST_WAKEUP, R_UNRETRIEVED,
       R_SELF_WAKE, R_LATE_TIMER, R_DEADLOCK, R_LOSSY, R_COUNT };

typedef struct lint {
    ls_trace *t;
    ls_json *j;                /* NULL: text */
    int64_t start, end, thr, late;
    bool generic;              /* generic loop mode: loop threads, asyncio tasks */
    bool lifecycle;            /* a task lifecycle (libevl, or a generic trace's census):
                                  the task rules and the deadlock rule run */
    long counts[R_COUNT];
    long total;
} lint;

/* Start a warning: text line, or a JSON object with its "evidence" object
 * left open for lint_ev_* (lint_warn_end closes it).  task_id < 0: no task. */
void lint_warn_begin(lint *L, int rule, int64_t task_id, const char *task, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void lint_ev_int(lint *L, const char *k, int64_t v);
void lint_ev_str(lint *L, const char *k, const char *v);
void lint_warn_end(lint *L);

/* Durations and times from the recording start for messages ("+1.23s");
 * a few buffers so one printf can use several. */
const char *lint_dur(int64_t ns);
const char *lint_at(lint *L, int64_t ns);
/* "file.c:42 fn" without GCC's clone suffixes (malloc'd; NULL if none). */
char *lint_site_text(const char *file, int line, const char *fn);
static inline const char *lint_task_or(const char *name) { return name ? name : "?"; }

/* Prepare sql and bind ?1 start, ?2 end, ?3 threshold, ?4 late. */
sqlite3_stmt *lint_prep(lint *L, const char *sql);
/* Step st to the end, calling row for each row; finalizes st. */
bool lint_run_rows(lint *L, sqlite3_stmt *st, void (*row)(lint *L, sqlite3_stmt *st));

/* The task lifecycle rules (lint_tasks.c), in rule order: never-yields,
 * leaked-task, lost-wakeup, unretrieved-error, self-wake, late-timer; they
 * start with the pass (lint_pass.c) that fills the temporary tables
 * lint_ev, lint_step, lint_late and lint_blk they read. */
bool lint_task_rules(lint *L);
/* The deadlock rule (lint_deadlock.c). */
bool lint_deadlock(lint *L);
bool lint_pass(lint *L);

/* never-yields candidates: a long longest step (task_stats). */
#define LINT_NEVER_CANDIDATES                                                             \
    " FROM tasks t JOIN task_stats s ON s.task_id = t.id"                                 \
    " WHERE s.longest_step_ns >= ?3 OR (s.longest_step_ns >= max(1000000, ?3 / 10)"       \
    "   AND 2 * s.longest_step_ns >= coalesce(t.ended_ns, ?2) - t.created_ns)"

#endif
