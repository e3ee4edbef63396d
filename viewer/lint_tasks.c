/*
 * lint_tasks.c -- the task lifecycle rules of `loopscope lint`
 * (never-yields, leaked-task, lost-wakeup, unretrieved-error, self-wake,
 * late-timer; their definitions are in `loopscope lint --help`).
 * Depends on lint.h and ls_codes.h.
 *
 * One sequential pass over the events (lint_pass.c: the task lifecycle
 * kinds fed to the one replay of task states, model/replay.h) fills a few
 * small temporary tables, and each rule is then one query over them,
 * the derived tables (task_stats) and index lookups on tasks and
 * events(task_id, ts_ns), at most a few per task, ordered so the output is
 * stable.  So the cost is one read of the events plus the replay, linear
 * whatever a forged trace holds (no lookup per event).  Times are clamped
 * when read (ls_col_ts).  Schema: tracer/SCHEMA.md.
 */
#include "lint.h"
#include "evl-probes.h"
#include "ls_codes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------- never-yields */

/* Candidates from task_stats, each with its longest step from the pass
 * (lint_step); off-CPU time in the step from lint_blk (blocking has no index on
 * task_id). */
static const char never_sql[] =
    "WITH c AS (SELECT t.id, t.name, t.function, s.longest_step_ns AS step, s.resumes,"
    "    coalesce(t.ended_ns, ?2) - t.created_ns AS life" LINT_NEVER_CANDIDATES ")"
    " SELECT c.id, c.name, c.function, c.step, c.resumes, c.life, b.ts_ns, b.len,"
    "  (SELECT CAST(total(k.dur_ns) AS INTEGER) FROM lint_blk k WHERE k.task_id = c.id"
    "     AND k.start_ns >= b.ts_ns AND k.start_ns < b.ts_ns + b.len)"
    " FROM c JOIN lint_step b ON b.task_id = c.id ORDER BY c.id";

static void never_row(lint *L, sqlite3_stmt *st)
{
    int64_t id = sqlite3_column_int64(st, 0), step = ls_col_ts(st, 3);
    int64_t resumes = sqlite3_column_int64(st, 4), life = ls_col_ts(st, 5);
    int64_t ts = ls_col_ts(st, 6), blocked = ls_col_ts(st, 8);
    const char *name = ls_col_text(st, 1), *fn = ls_col_text(st, 2);
    char *clean = lint_site_text(NULL, 0, fn);
    char extra[96] = "";
    if (blocked > 0)
        snprintf(extra, sizeof(extra), "; %s of it blocked off-cpu, see blocking-step",
                 lint_dur(blocked));
    int pct = life > 0 ? (int)fmin(100.0 * (double)step / (double)life, 100) : 100;
    if (pct > 100)
        pct = 100;
    /* No function (an asyncio task from a census): no " in ..." */
    const char *in = clean || !L->generic ? " in " : "";
    const char *where = clean ? clean : L->generic ? "" : "?";
    if (resumes <= 1)
        lint_warn_begin(L, R_NEVER_YIELDS, id, name,
                   "task '%s' (id %lld) never yielded: its only step ran %s (%d%% of its "
                   "lifetime)%s%s (%s)%s", lint_task_or(name), (long long)id, lint_dur(step), pct,
                   in, where, lint_at(L, ts), extra);
    else
        lint_warn_begin(L, R_NEVER_YIELDS, id, name,
                   "task '%s' (id %lld) ran %s without yielding (the longest of its %lld steps, "
                   "%d%% of its lifetime)%s%s (%s)%s", lint_task_or(name), (long long)id,
                   lint_dur(step),
                   (long long)resumes, pct, in, where, lint_at(L, ts), extra);
    lint_ev_int(L, "step_start_ns", ts - L->start);
    lint_ev_int(L, "step_ns", step);
    lint_ev_int(L, "steps", resumes);
    lint_ev_int(L, "lifetime_ns", life);
    lint_ev_int(L, "blocked_off_cpu_ns", blocked);
    lint_ev_str(L, "function", fn);
    lint_warn_end(L);
    free(clean);
}

/* ---------------------------------------------------------- leaked-task */

/* What the task was doing when the verdict came: its last suspend. */
static const char leak_sql[] =
    "SELECT l.task_id, t.name, l.reason, k.name, l.ts_ns, s.ts_ns, r.name, s.arg0"
    /* one verdict per task and kind (libevl gives one): each costs a lookup */
    " FROM (SELECT task_id, reason, min(ts_ns) AS ts_ns, rid FROM lint_ev"   /* rid: of the min */
    "   WHERE kind = " LS_SQL_KIND_task_leak " AND reason IN (" LS_SQL_LEAK_PENDING_AT_CLOSE ", "
    LS_SQL_LEAK_ABANDONED ") GROUP BY task_id, reason) l"
    " LEFT JOIN tasks t ON t.id = l.task_id"
    " LEFT JOIN leak_kinds k ON k.id = l.reason"
    " LEFT JOIN events s ON s.rowid = (SELECT p.rowid FROM events p WHERE p.task_id = l.task_id"
    "   AND p.kind = " LS_SQL_KIND_task_suspend " AND p.ts_ns <= l.ts_ns"
    "   ORDER BY p.ts_ns DESC, p.rowid DESC LIMIT 1)"
    " LEFT JOIN suspend_reasons r ON r.id = s.reason"
    " ORDER BY l.ts_ns, l.rid";

static void awaits_text(char *buf, size_t n, const char *reason, int64_t obj)
{
    if (!reason)
        snprintf(buf, n, "?");
    else if (!strcmp(reason, "task"))
        snprintf(buf, n, "task (id %lld)", (long long)obj);
    else if (!strcmp(reason, "io"))
        snprintf(buf, n, "io (fd %lld)", (long long)obj);
    else if (!strcmp(reason, "sleep") || !strcmp(reason, "yield"))
        snprintf(buf, n, "%s", reason);
    else
        snprintf(buf, n, "%s 0x%llx", reason, (unsigned long long)obj);
}

static void leak_row(lint *L, sqlite3_stmt *st)
{
    int64_t id = sqlite3_column_int64(st, 0), kind = sqlite3_column_int64(st, 2);
    int64_t ts = ls_col_ts(st, 4);
    const char *name = ls_col_text(st, 1), *kname = ls_col_text(st, 3),
               *reason = ls_col_text(st, 6);
    char what[160] = "", aw[80];
    if (!ls_col_null(st, 5)) {
        awaits_text(aw, sizeof(aw), reason, sqlite3_column_int64(st, 7));
        snprintf(what, sizeof(what), " (suspended on %s since %s)", aw,
                 lint_at(L, ls_col_ts(st, 5)));
    }
    lint_warn_begin(L, R_LEAKED, id, name, "task '%s' (id %lld) leaked at %s: %s%s",
               lint_task_or(name), (long long)id, lint_at(L, ts),
               kind == EVL_LEAK_PENDING_AT_CLOSE ? "still pending when its loop closed"
                                                 : "awaits a future that nothing can complete",
               what);
    lint_ev_str(L, "verdict", kname);
    lint_ev_int(L, "leak_ns", ts - L->start);
    if (!ls_col_null(st, 5)) {
        lint_ev_int(L, "suspended_ns", ls_col_ts(st, 5) - L->start);
        lint_ev_str(L, "suspend_reason", reason);
        lint_ev_int(L, "awaited", sqlite3_column_int64(st, 7));
    }
    lint_warn_end(L);
}

/* ---------------------------------------------------------- lost-wakeup */

/* Every unfinished task with its last lifecycle event (create..finish). */
static const char lost_sql[] =
    "SELECT t.id, t.name, coalesce(l.stopped_ns, ?2) AS stop, l.stopped_ns IS NOT NULL,"
    "  e.kind, e.ts_ns, e.reason, e.arg0, a.name, a.ended_ns, wk.name, sr.name,"
    "  (SELECT min(c.ts_ns) FROM lint_ev c WHERE c.task_id = t.id"
    "     AND c.kind = " LS_SQL_KIND_task_cancel " AND c.ts_ns >= e.ts_ns)"
    " FROM tasks t LEFT JOIN loops l ON l.id = t.loop_id"
    " JOIN events e ON e.rowid = (SELECT p.rowid FROM events p WHERE p.task_id = t.id"
    "   AND p.kind BETWEEN " LS_SQL_KIND_task_create " AND " LS_SQL_KIND_task_finish
    "   ORDER BY p.ts_ns DESC, p.rowid DESC LIMIT 1)"
    " LEFT JOIN tasks a ON e.kind = " LS_SQL_KIND_task_suspend
    "   AND e.reason = " LS_SQL_SUSPEND_TASK " AND a.id = e.arg0"
    " LEFT JOIN waker_kinds wk ON e.kind = " LS_SQL_KIND_task_wake " AND wk.id = e.reason"
    " LEFT JOIN suspend_reasons sr ON e.kind = " LS_SQL_KIND_task_suspend " AND sr.id = e.reason"
    " WHERE t.ended_ns IS NULL ORDER BY t.id";

static void lost_row(lint *L, sqlite3_stmt *st)
{
    int64_t id = sqlite3_column_int64(st, 0), stop = ls_col_ts(st, 2);
    bool stopped = sqlite3_column_int(st, 3) != 0;
    int kind = sqlite3_column_int(st, 4);
    int64_t ts = ls_col_ts(st, 5), reason = sqlite3_column_int64(st, 6);
    int64_t arg0 = sqlite3_column_int64(st, 7);
    const char *name = ls_col_text(st, 1), *awaited = ls_col_text(st, 8);
    const char *waker = ls_col_text(st, 10), *sreason = ls_col_text(st, 11);
    const char *until = stopped ? "its loop stopped" : "the recording ended";
    if (kind == EVL_PROBE_ID_task_wake && stop - ts >= L->thr) {                          /* (a) */
        lint_warn_begin(L, R_LOST_WAKEUP, id, name,
                   "task '%s' (id %lld) was woken (%s) at %s but never ran again; %s %s later",
                   lint_task_or(name), (long long)id, waker ? waker : "?", lint_at(L, ts), until,
                   lint_dur(stop - ts));
        lint_ev_str(L, "case", "woken, never ran");
        lint_ev_int(L, "wake_ns", ts - L->start);
        lint_ev_str(L, "waker_kind", waker);
        if (arg0 > 0)
            lint_ev_int(L, "waker_task", arg0);
    } else if (kind == EVL_PROBE_ID_task_suspend && reason == EVL_SUSPEND_TASK &&
               !ls_col_null(st, 9) &&
               stop - (ls_col_ts(st, 9) > ts ? ls_col_ts(st, 9) : ts) >= L->thr) {
        int64_t done = ls_col_ts(st, 9);                  /* (b) */
        lint_warn_begin(L, R_LOST_WAKEUP, id, name,
                   "task '%s' (id %lld) awaits task '%s' (id %lld), which finished at %s, but "
                   "was never woken; %s %s later", lint_task_or(name), (long long)id,
                   lint_task_or(awaited), (long long)arg0, lint_at(L, done), until,
                   lint_dur(stop - (done > ts ? done : ts)));
        lint_ev_str(L, "case", "awaited task finished, never woken");
        lint_ev_int(L, "suspend_ns", ts - L->start);
        lint_ev_int(L, "awaited_task", arg0);
        lint_ev_int(L, "awaited_end_ns", done - L->start);
    } else if (kind == EVL_PROBE_ID_task_suspend && !ls_col_null(st, 12) &&
               stop - ls_col_ts(st, 12) >= L->thr) {
        int64_t c = ls_col_ts(st, 12);                    /* (c) */
        lint_warn_begin(L, R_LOST_WAKEUP, id, name,
                   "task '%s' (id %lld) was cancelled at %s while suspended on %s, but was "
                   "never woken; %s %s later", lint_task_or(name), (long long)id, lint_at(L, c),
                   sreason ? sreason : "?", until, lint_dur(stop - c));
        lint_ev_str(L, "case", "cancelled, never woken");
        lint_ev_int(L, "suspend_ns", ts - L->start);
        lint_ev_str(L, "suspend_reason", sreason);
        lint_ev_int(L, "cancel_ns", c - L->start);
    } else {
        return;
    }
    lint_ev_int(L, "stop_ns", stop - L->start);
    lint_warn_end(L);
}

/* ---------------------------------------------------- unretrieved-error */

/* libevl's verdicts, then failed tasks without one that nobody awaited.
 * The awaited set is lint_ev's suspends on a task. */
static const char unretrieved_sql[] =
    "SELECT t.id, t.name, t.final_state, t.error, t.ended_ns, v.ts_ns, t.parent_id, p.name"
    " FROM tasks t LEFT JOIN (SELECT task_id, min(ts_ns) AS ts_ns FROM lint_ev"
    "   WHERE kind = " LS_SQL_KIND_task_leak " AND reason = " LS_SQL_LEAK_UNRETRIEVED
    "   GROUP BY task_id) v ON v.task_id = t.id"
    " LEFT JOIN tasks p ON p.id = t.parent_id"
    " WHERE v.ts_ns IS NOT NULL OR (t.final_state = " LS_SQL_STATE_FAILED
    "   AND NOT EXISTS (SELECT 1 FROM lint_ev w WHERE w.kind = " LS_SQL_KIND_task_suspend
    "     AND w.arg0 = t.id AND w.reason = " LS_SQL_SUSPEND_TASK ")"
    "   AND NOT EXISTS (SELECT 1 FROM lint_ev g WHERE g.task_id = t.parent_id"
    "     AND g.kind = " LS_SQL_KIND_task_suspend " AND g.reason = " LS_SQL_SUSPEND_GATHER
    "     AND g.ts_ns BETWEEN t.created_ns AND t.ended_ns))"
    " ORDER BY coalesce(v.ts_ns, t.ended_ns), t.id";

static void unretrieved_row(lint *L, sqlite3_stmt *st)
{
    int64_t id = sqlite3_column_int64(st, 0), err = sqlite3_column_int64(st, 3);
    const char *name = ls_col_text(st, 1);
    char e[32];
    ls_fmt_err(e, sizeof(e), err);
    /* error 0 on a failure: not recorded (a census sees that an asyncio
     * task failed, not its exception) */
    bool unknown = err == 0 && sqlite3_column_int(st, 2) == EVL_FINAL_FAILED;
    if (unknown)
        snprintf(e, sizeof(e), "an unknown error");
    bool verdict = !ls_col_null(st, 5);
    int state = sqlite3_column_int(st, 2);
    const char *how = state == EVL_FINAL_FAILED ? "failed"
                      : state == EVL_FINAL_CANCELLED ? "was cancelled" : "ended";
    if (verdict)
        lint_warn_begin(L, R_UNRETRIEVED, id, name,
                   "task '%s' (id %lld) %s with %s and nobody retrieved the error "
                   "(unretrieved verdict at %s)", lint_task_or(name), (long long)id, how, e,
                   lint_at(L, ls_col_ts(st, 5)));
    else
        lint_warn_begin(L, R_UNRETRIEVED, id, name,
                   "task '%s' (id %lld) failed with %s at %s and no task awaited it",
                   lint_task_or(name), (long long)id, e, lint_at(L, ls_col_ts(st, 4)));
    lint_ev_str(L, "case", verdict ? "unretrieved verdict" : "failed, no awaiter");
    lint_ev_int(L, "error", err);
    lint_ev_str(L, "error_name", unknown ? NULL : e);
    if (!ls_col_null(st, 4))
        lint_ev_int(L, "ended_ns", ls_col_ts(st, 4) - L->start);
    if (verdict)
        lint_ev_int(L, "verdict_ns", ls_col_ts(st, 5) - L->start);
    if (!ls_col_null(st, 6)) {
        lint_ev_int(L, "parent_id", sqlite3_column_int64(st, 6));
        lint_ev_str(L, "parent", ls_col_text(st, 7));
    }
    lint_warn_end(L);
}

/* ------------------------------------------------------------ self-wake */

static const char self_sql[] =
    "SELECT w.task_id, t.name, count(*), min(w.ts_ns), group_concat(DISTINCT k.name)"
    " FROM lint_ev w LEFT JOIN tasks t ON t.id = w.task_id"
    " LEFT JOIN waker_kinds k ON k.id = w.reason"
    " WHERE w.kind = " LS_SQL_KIND_task_wake " GROUP BY w.task_id ORDER BY min(w.ts_ns), w.task_id";

static void self_row(lint *L, sqlite3_stmt *st)
{
    int64_t id = sqlite3_column_int64(st, 0), n = sqlite3_column_int64(st, 2);
    const char *name = ls_col_text(st, 1), *kinds = ls_col_text(st, 4);
    lint_warn_begin(L, R_SELF_WAKE, id, name, "task '%s' (id %lld) woke itself %lld time%s (%s), "
               "first at %s", lint_task_or(name), (long long)id, (long long)n, n == 1 ? "" : "s",
               kinds ? kinds : "?", lint_at(L, ls_col_ts(st, 3)));
    lint_ev_int(L, "count", n);
    lint_ev_int(L, "first_ns", ls_col_ts(st, 3) - L->start);
    lint_ev_str(L, "waker_kinds", kinds);
    lint_warn_end(L);
}

/* ----------------------------------------------------------- late-timer */

/* The timer_lateness view's late sleeps, per task, from the pass
 * (lint_late): a sleep whose span the replay ended with a timer wake. */
static const char late_sql[] =
    "SELECT x.task_id, t.name, x.n, x.worst, x.worst_at, x.deadline"
    " FROM lint_late x LEFT JOIN tasks t ON t.id = x.task_id ORDER BY x.worst_at, x.task_id";

static void late_row(lint *L, sqlite3_stmt *st)
{
    int64_t id = sqlite3_column_int64(st, 0), n = sqlite3_column_int64(st, 2);
    int64_t worst = ls_col_ts(st, 3), when = ls_col_ts(st, 4);
    const char *name = ls_col_text(st, 1);
    if (n == 1)
        lint_warn_begin(L, R_LATE_TIMER, id, name, "task '%s' (id %lld): a timer fired %s late "
                   "(deadline %s, fired %s)", lint_task_or(name), (long long)id, lint_dur(worst),
                   lint_at(L, ls_col_ts(st, 5)), lint_at(L, when));
    else
        lint_warn_begin(L, R_LATE_TIMER, id, name, "task '%s' (id %lld): %lld timers fired more "
                   "than %s late, the worst %s late (fired %s)", lint_task_or(name), (long long)id,
                   (long long)n, lint_dur(L->late), lint_dur(worst), lint_at(L, when));
    lint_ev_int(L, "count", n);
    lint_ev_int(L, "threshold_ns", L->late);
    lint_ev_int(L, "worst_late_ns", worst);
    lint_ev_int(L, "worst_deadline_ns", ls_col_ts(st, 5) - L->start);
    lint_ev_int(L, "worst_fired_ns", when - L->start);
    lint_warn_end(L);
}


/* ------------------------------------------------------------- the rules */

bool lint_task_rules(lint *L)
{
    static const struct { const char *sql; void (*row)(lint *, sqlite3_stmt *); } rules[] = {
        { never_sql, never_row }, { leak_sql, leak_row }, { lost_sql, lost_row },
        { unretrieved_sql, unretrieved_row }, { self_sql, self_row }, { late_sql, late_row },
    };
    if (!lint_pass(L))
        return false;
    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
        sqlite3_stmt *st = lint_prep(L, rules[i].sql);
        if (!st || !lint_run_rows(L, st, rules[i].row))
            return false;
    }
    return true;
}

