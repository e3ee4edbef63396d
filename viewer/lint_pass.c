/*
 * lint_pass.c -- what the task lifecycle rules of `loopscope lint` read,
 * gathered from the derived tables (model/derived.sql), which the one
 * replay of task states (model/replay.h) filled when the trace was
 * recorded or first read: no rule scans the events.  Depends on lint.h and
 * ls_codes.h.
 *
 * The temporary tables the rules (lint_tasks.c) read:
 *  - lint_ev: the rare lifecycle facts (task_marks: cancels, leaks,
 *    suspends on a task or a gather, self-wakes other than yields);
 *  - lint_step: each never-yields candidate's longest slice, task_run to
 *    its next suspend or finish (task_slices; candidates from task_stats);
 *  - lint_late: per task, the sleeps whose timer fired more than --late
 *    after the deadline (late_timers): how many, the worst (the first of
 *    equals) and its deadline;
 *  - lint_blk: off-CPU episodes by task.
 * late_timers keeps sleeps from meta late_timer_floor_ns (1 ms, or the
 * blocking threshold if lower) on: a --late below it is raised to it, and
 * lint says so on stderr.
 */
#include "lint.h"
#include "ls_codes.h"

#include <stdio.h>

static const char pass_sql[] =
    "CREATE TEMP TABLE lint_ev AS SELECT rid, ts_ns, task_id, kind, reason, arg0 FROM task_marks;"
    "CREATE TEMP TABLE lint_step(task_id INTEGER PRIMARY KEY, ts_ns INTEGER, len INTEGER);"
    "CREATE TEMP TABLE lint_late(task_id INTEGER PRIMARY KEY, n INTEGER, worst INTEGER,"
    "  worst_at INTEGER, deadline INTEGER);"
    "CREATE TEMP TABLE lint_blk AS SELECT task_id, start_ns, dur_ns FROM blocking"
    "  WHERE kind = " LS_SQL_BLOCK_OFFCPU ";"
    "CREATE INDEX temp.lint_blk_task ON lint_blk(task_id, start_ns);"
    "CREATE INDEX temp.lint_ev_task ON lint_ev(task_id, kind, reason, ts_ns);"
    "CREATE INDEX temp.lint_ev_arg ON lint_ev(kind, arg0);";

/* ?2 end, ?3 threshold (lint_prep) for the candidates. */
static const char step_sql[] =
    "INSERT INTO lint_step SELECT s.task_id, s.longest_at_ns, s.longest_ns FROM task_slices s"
    " WHERE s.task_id IN (SELECT t.id" LINT_NEVER_CANDIDATES ")";

/* ?4 late.  max() with bare columns takes them from the first row with the
 * maximum, in rowid order: the order the replay saw the sleeps. */
static const char late_sql[] =
    "INSERT INTO lint_late SELECT task_id, count(*), max(late_ns), fired_ns, deadline_ns"
    " FROM late_timers WHERE late_ns > ?4 GROUP BY task_id";

static bool run(lint *L, const char *sql)
{
    sqlite3_stmt *st = lint_prep(L, sql);
    bool ok = st && ls_step_ok(L->t, st, sqlite3_step(st));
    sqlite3_finalize(st);
    return ok;
}

bool lint_pass(lint *L)
{
    int64_t floor = ls_meta_int(L->t, LS_META_LATE_TIMER_FLOOR_NS, 0);
    if (L->late < floor) {
        char a[32], b[32];
        fprintf(stderr, "note: lint: --late %s is below what the trace keeps of late timers "
                        "(from %s late): using %s\n", ls_fmt_dur(a, sizeof(a), L->late),
                ls_fmt_dur(b, sizeof(b), floor), b);
        L->late = floor;
    }
    char *msg = NULL;
    if (sqlite3_exec(L->t->db, pass_sql, NULL, NULL, &msg) != SQLITE_OK) {
        ls_error("reading trace '%s': %s", L->t->path, msg ? msg : "?");
        sqlite3_free(msg);
        return false;
    }
    return run(L, step_sql) && run(L, late_sql);
}
