/*
 * lint_tasks.c -- the task lifecycle rules of `loopscope lint`
 * (never-yields, leaked-task, lost-wakeup, unretrieved-error, self-wake,
 * late-timer; their definitions are in `loopscope lint --help`).
 * Depends on lint.h, model/replay.h and ls_codes.h.
 *
 * One sequential pass over the events (the task lifecycle kinds) feeds the
 * one replay of task states (model/replay.h); its spans and marks fill a
 * few small temporary tables, and each rule is then one query over them,
 * the derived tables (task_stats) and index lookups on tasks and
 * events(task_id, ts_ns), at most a few per task, ordered so the output is
 * stable.  So the cost is one read of the events plus the replay, linear
 * whatever a forged trace holds (no lookup per event).  Times are clamped
 * when read (ls_col_ts).  Schema: tracer/SCHEMA.md.
 */
#include "lint.h"
#include "ls_codes.h"
#include "replay.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *col_text(sqlite3_stmt *st, int i)
{
    return (const char *)sqlite3_column_text(st, i);
}

static bool col_null(sqlite3_stmt *st, int i) { return sqlite3_column_type(st, i) == SQLITE_NULL; }

/* ------------------------------------------------------------- the pass */

/* The one pass over the events: the task lifecycle events in rowid order
 * (each task's in the order the loop made them), fed to the replay.  What
 * the rules need comes from its spans and marks:
 *  - lint_ev: the rare events (cancels, leaks, suspends on a task or a
 *    gather, self-wakes other than yields), indexed afterwards for the
 *    rules' lookups by task and by awaited task;
 *  - lint_step: each never-yields candidate's longest step, task_run to
 *    the task's next suspend or finish (the candidates come from
 *    task_stats first);
 *  - lint_late: per task, the sleeps whose timer fired more than --late
 *    after the deadline (a sleep span ended by a timer wake): how many,
 *    the worst (the first of equals) and its deadline.
 * Memory: the replay's live tasks, the candidates and the late tasks. */
static const char pass_tables_sql[] =
    "CREATE TEMP TABLE lint_ev(rid INTEGER, ts_ns INTEGER, task_id INTEGER, kind INTEGER,"
    "  reason INTEGER, arg0 INTEGER);"
    "CREATE TEMP TABLE lint_step(task_id INTEGER PRIMARY KEY, ts_ns INTEGER, len INTEGER);"
    "CREATE TEMP TABLE lint_late(task_id INTEGER PRIMARY KEY, n INTEGER, worst INTEGER,"
    "  worst_at INTEGER, deadline INTEGER);"
    "CREATE TEMP TABLE lint_blk AS SELECT task_id, start_ns, dur_ns FROM blocking"
    "  WHERE kind = " LS_SQL_BLOCK_OFFCPU ";"
    "CREATE INDEX temp.lint_blk_task ON lint_blk(task_id, start_ns);";
static const char pass_index_sql[] =
    "CREATE INDEX temp.lint_ev_task ON lint_ev(task_id, kind, reason, ts_ns);"
    "CREATE INDEX temp.lint_ev_arg ON lint_ev(kind, arg0);";

/* never-yields candidates: a long longest step (task_stats). */
#define NEVER_CANDIDATES                                                                  \
    " FROM tasks t JOIN task_stats s ON s.task_id = t.id"                                 \
    " WHERE s.longest_step_ns >= ?3 OR (s.longest_step_ns >= max(1000000, ?3 / 10)"        \
    "   AND 2 * s.longest_step_ns >= coalesce(t.ended_ns, ?2) - t.created_ns)"

/* A never-yields candidate: its step under way and its longest. */
typedef struct cand {
    int64_t id;
    int64_t pend;                /* the start of the step under way, or -1 */
    int64_t ts, len;             /* the longest step; len -1: none */
} cand;

typedef struct late_agg {
    int64_t task, n, worst, at, deadline;
} late_agg;

typedef struct pass {
    lint *L;
    ls_replay *r;
    sqlite3_stmt *ins;           /* INSERT INTO lint_ev */
    int64_t rowid;               /* the event being fed */
    cand *cand;                  /* never-yields candidates, sorted by id */
    size_t ncand;
    late_agg *late;              /* open addressing by task id (0: free) */
    size_t late_cap, nlate;
    bool failed;             /* an insert failed */
} pass;

static void pass_insert(pass *p, int64_t rid, int64_t ts, int64_t task, int kind, int64_t reason,
                        int64_t arg0)
{
    sqlite3_stmt *q = p->ins;
    sqlite3_reset(q);
    if (rid >= 0)
        sqlite3_bind_int64(q, 1, rid);
    else
        sqlite3_bind_null(q, 1);
    sqlite3_bind_int64(q, 2, ts);
    sqlite3_bind_int64(q, 3, task);
    sqlite3_bind_int(q, 4, kind);
    sqlite3_bind_int64(q, 5, reason);
    sqlite3_bind_int64(q, 6, arg0);
    if (sqlite3_step(q) != SQLITE_DONE)
        p->failed = true;
}

static late_agg *late_slot(pass *p, int64_t task)
{
    if (2 * (p->nlate + 1) > p->late_cap) {
        size_t cap = p->late_cap ? 2 * p->late_cap : 64;
        late_agg *a = calloc(cap, sizeof(*a));
        if (!a)
            return NULL;
        for (size_t i = 0; i < p->late_cap; i++)
            if (p->late[i].task) {
                size_t k = ((uint64_t)p->late[i].task * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1);
                while (a[k].task)
                    k = (k + 1) & (cap - 1);
                a[k] = p->late[i];
            }
        free(p->late);
        p->late = a;
        p->late_cap = cap;
    }
    size_t k = ((uint64_t)task * 0x9E3779B97F4A7C15ull >> 20) & (p->late_cap - 1);
    while (p->late[k].task && p->late[k].task != task)
        k = (k + 1) & (p->late_cap - 1);
    if (!p->late[k].task) {
        p->late[k] = (late_agg){ .task = task, .worst = INT64_MIN };
        p->nlate++;
    }
    return &p->late[k];
}

/* A step of a candidate: from a task_run to the task's next suspend or
 * finish (other events on the way, such as another task_run, do not end
 * it); of equally long ones the last, as the window query had it. */
static void cand_span(pass *p, const ls_span *s)
{
    size_t lo = 0, hi = p->ncand;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (p->cand[mid].id < (int64_t)s->task)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == p->ncand || p->cand[lo].id != (int64_t)s->task)
        return;
    cand *c = &p->cand[lo];
    if (s->state == EVL_FINAL_RUNNING && c->pend < 0)
        c->pend = s->start;
    bool ends = s->end_kind == EVL_PROBE_ID_task_suspend || s->end_kind == EVL_PROBE_ID_task_finish;
    if (c->pend >= 0 && (ends || s->end_kind == 0)) {
        int64_t len = (ends ? s->end : p->L->end) - c->pend;   /* unended: to the end */
        if (len >= c->len) {
            c->len = len;
            c->ts = c->pend;
        }
        c->pend = -1;
    }
}

static void on_span(void *ctx, const ls_span *s)
{
    pass *p = ctx;
    int64_t task = (int64_t)s->task;
    if (p->ncand)
        cand_span(p, s);
    if (s->node == LS_NODE_PREEXISTING)
        return;                          /* its detail is not a reason */
    if (s->state == EVL_FINAL_SUSPENDED) {
        if (s->detail == EVL_SUSPEND_TASK || s->detail == EVL_SUSPEND_GATHER)
            pass_insert(p, -1, s->start, task, EVL_PROBE_ID_task_suspend, s->detail, s->object);
        int64_t deadline = ls_ts(s->object);     /* a time: clamped as the others */
        if (s->detail == EVL_SUSPEND_SLEEP && s->end_kind == EVL_PROBE_ID_task_wake &&
            s->end_reason == EVL_WAKER_TIMER && s->object != 0 &&
            s->end - deadline > p->L->late) {
            late_agg *a = late_slot(p, task);
            if (!a) {
                p->failed = true;
                return;
            }
            a->n++;
            if (s->end - deadline > a->worst) {
                a->worst = s->end - deadline;
                a->at = s->end;
                a->deadline = deadline;
            }
        }
    } else if (s->node == LS_NODE_READY && s->object == task && s->detail != EVL_WAKER_YIELD) {
        pass_insert(p, -1, s->start, task, EVL_PROBE_ID_task_wake, s->detail, s->object);
    }
}

static void on_mark(void *ctx, const ls_event *e)
{
    pass *p = ctx;
    pass_insert(p, p->rowid, e->ts, (int64_t)e->task, e->kind, e->reason, e->arg0);
}

/* lint_feed(rowid, ts_ns, loop_id, task_id, kind, reason, arg0):
 * one event to the replay. */
static void lint_feed(sqlite3_context *c, int argc, sqlite3_value **v)
{
    pass *p = sqlite3_user_data(c);
    (void)argc;
    if (p->failed)
        return;
    p->rowid = sqlite3_value_int64(v[0]);
    ls_event e = {
        .ts = ls_ts(sqlite3_value_int64(v[1])), .loop = (uint64_t)sqlite3_value_int64(v[2]),
        .task = (uint64_t)sqlite3_value_int64(v[3]), .kind = sqlite3_value_int(v[4]),
        .reason = sqlite3_value_int64(v[5]), .arg0 = sqlite3_value_int64(v[6]),
    };                                   /* arg1 (a suspend's timeout): no rule uses it */
    ls_replay_event(p->r, &e);
}

/* The never-yields candidates, sorted by id. */
static bool pass_candidates(pass *p)
{
    sqlite3_stmt *st = lint_prep(p->L, "SELECT t.id" NEVER_CANDIDATES " ORDER BY t.id");
    if (!st)
        return false;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (p->ncand == cap) {
            cap = cap ? 2 * cap : 64;
            cand *a = realloc(p->cand, cap * sizeof(*a));
            if (!a) {
                sqlite3_finalize(st);
                ls_error("out of memory");
                return false;
            }
            p->cand = a;
        }
        p->cand[p->ncand++] = (cand){ .id = sqlite3_column_int64(st, 0), .pend = -1, .len = -1 };
    }
    bool ok = ls_step_ok(p->L->t, st, rc);
    sqlite3_finalize(st);
    return ok;
}

/* Write the candidates' steps and the late timers' aggregates. */
static bool pass_results(pass *p)
{
    sqlite3_stmt *a = ls_prepare(p->L->t, "INSERT INTO lint_step VALUES(?1, ?2, ?3)");
    sqlite3_stmt *b = a ? ls_prepare(p->L->t, "INSERT INTO lint_late VALUES(?1, ?2, ?3, ?4, ?5)")
                        : NULL;
    bool ok = a && b;
    for (size_t i = 0; ok && i < p->ncand; i++) {
        if (p->cand[i].len < 0)
            continue;
        sqlite3_reset(a);
        sqlite3_bind_int64(a, 1, p->cand[i].id);
        sqlite3_bind_int64(a, 2, p->cand[i].ts);
        sqlite3_bind_int64(a, 3, p->cand[i].len);
        ok = sqlite3_step(a) == SQLITE_DONE;
    }
    for (size_t i = 0; ok && i < p->late_cap; i++) {
        const late_agg *g = &p->late[i];
        if (!g->task)
            continue;
        sqlite3_reset(b);
        int64_t v[] = { g->task, g->n, g->worst, g->at, g->deadline };
        for (int k = 0; k < 5; k++)
            sqlite3_bind_int64(b, k + 1, v[k]);
        ok = sqlite3_step(b) == SQLITE_DONE;
    }
    if (!ok && a && b)
        ls_error("reading trace '%s': %s", p->L->t->path, sqlite3_errmsg(p->L->t->db));
    sqlite3_finalize(a);
    sqlite3_finalize(b);
    return ok;
}

static bool run_pass(lint *L)
{
    pass p = { .L = L };
    ls_replay *r = NULL;
    sqlite3_stmt *ev = NULL, *lp = NULL;
    bool ok = false;
    char *msg = NULL;
    if (sqlite3_exec(L->t->db, pass_tables_sql, NULL, NULL, &msg) != SQLITE_OK) {
        ls_error("reading trace '%s': %s", L->t->path, msg ? msg : "?");
        sqlite3_free(msg);
        return false;
    }
    if (!pass_candidates(&p))
        goto out;
    ls_replay_ops ops = { .on_span = on_span, .on_mark = on_mark, .ctx = &p };
    r = ls_replay_new(&ops, SIZE_MAX / 2);     /* as model/derive.c: every task */
    p.ins = ls_prepare(L->t, "INSERT INTO lint_ev VALUES(?1, ?2, ?3, ?4, ?5, ?6)");
    lp = ls_prepare(L->t, "SELECT id, stopped_ns FROM loops WHERE stopped_ns IS NOT NULL");
    if (!r || !p.ins || !lp) {
        if (!r)
            ls_error("out of memory");
        goto out;
    }
    while (sqlite3_step(lp) == SQLITE_ROW)
        ls_replay_loop_stop(r, (uint64_t)sqlite3_column_int64(lp, 0), ls_col_ts(lp, 1));
    /* The events go to the replay through a function the scan calls for
     * each row: a row returned to C would cost an API call per column. */
    p.r = r;
    if (sqlite3_create_function(L->t->db, "lint_feed", 7, SQLITE_UTF8 | SQLITE_DIRECTONLY, &p,
                                lint_feed, NULL, NULL) != SQLITE_OK) {
        ls_error("reading trace '%s': %s", L->t->path, sqlite3_errmsg(L->t->db));
        goto out;
    }
    /* A plain scan of the table: rowid order, no sort (the events table
     * has no ORDER BY-changing index on rowid; see EXPLAIN QUERY PLAN). */
    ev = ls_prepare(L->t, "SELECT count(lint_feed(rowid, ts_ns, loop_id, task_id, kind, reason,"
                          " arg0)) FROM events WHERE kind BETWEEN " LS_SQL_KIND_task_create
                          " AND " LS_SQL_KIND_task_leak);
    if (!ev || !ls_step_ok(L->t, ev, sqlite3_step(ev)))
        goto out;
    ls_replay_end(r, L->end);
    if (p.failed) {
        ls_error("reading trace '%s': %s", L->t->path, sqlite3_errmsg(L->t->db));
        goto out;
    }
    if (!pass_results(&p))
        goto out;
    if (sqlite3_exec(L->t->db, pass_index_sql, NULL, NULL, &msg) != SQLITE_OK) {
        ls_error("reading trace '%s': %s", L->t->path, msg ? msg : "?");
        sqlite3_free(msg);
        goto out;
    }
    ok = true;
out:
    sqlite3_finalize(ev);
    sqlite3_finalize(lp);
    sqlite3_finalize(p.ins);
    ls_replay_free(r);
    free(p.cand);
    free(p.late);
    return ok;
}

/* --------------------------------------------------------- never-yields */

/* Candidates from task_stats, each with its longest step from the pass
 * (lint_step); off-CPU time in the step from lint_blk (blocking has no index on
 * task_id). */
static const char never_sql[] =
    "WITH c AS (SELECT t.id, t.name, t.function, s.longest_step_ns AS step, s.resumes,"
    "    coalesce(t.ended_ns, ?2) - t.created_ns AS life" NEVER_CANDIDATES ")"
    " SELECT c.id, c.name, c.function, c.step, c.resumes, c.life, b.ts_ns, b.len,"
    "  (SELECT CAST(total(k.dur_ns) AS INTEGER) FROM lint_blk k WHERE k.task_id = c.id"
    "     AND k.start_ns >= b.ts_ns AND k.start_ns < b.ts_ns + b.len)"
    " FROM c JOIN lint_step b ON b.task_id = c.id ORDER BY c.id";

static void never_row(lint *L, sqlite3_stmt *st)
{
    int64_t id = sqlite3_column_int64(st, 0), step = ls_col_ts(st, 3);
    int64_t resumes = sqlite3_column_int64(st, 4), life = ls_col_ts(st, 5);
    int64_t ts = ls_col_ts(st, 6), blocked = ls_col_ts(st, 8);
    const char *name = col_text(st, 1), *fn = col_text(st, 2);
    char *clean = lint_site_text(NULL, 0, fn);
    char extra[96] = "";
    if (blocked > 0)
        snprintf(extra, sizeof(extra), "; %s of it blocked off-cpu, see blocking-step", lint_dur(blocked));
    int pct = life > 0 ? (int)fmin(100.0 * (double)step / (double)life, 100) : 100;
    if (pct > 100)
        pct = 100;
    if (resumes <= 1)
        lint_warn_begin(L, R_NEVER_YIELDS, id, name,
                   "task '%s' (id %lld) never yielded: its only step ran %s (%d%% of its "
                   "lifetime) in %s (%s)%s", lint_task_or(name), (long long)id, lint_dur(step), pct,
                   clean ? clean : "?", lint_at(L, ts), extra);
    else
        lint_warn_begin(L, R_NEVER_YIELDS, id, name,
                   "task '%s' (id %lld) ran %s without yielding (the longest of its %lld steps, "
                   "%d%% of its lifetime) in %s (%s)%s", lint_task_or(name), (long long)id, lint_dur(step),
                   (long long)resumes, pct, clean ? clean : "?", lint_at(L, ts), extra);
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
    const char *name = col_text(st, 1), *kname = col_text(st, 3), *reason = col_text(st, 6);
    char what[160] = "", aw[80];
    if (!col_null(st, 5)) {
        awaits_text(aw, sizeof(aw), reason, sqlite3_column_int64(st, 7));
        snprintf(what, sizeof(what), " (suspended on %s since %s)", aw,
                 lint_at(L, ls_col_ts(st, 5)));
    }
    lint_warn_begin(L, R_LEAKED, id, name, "task '%s' (id %lld) leaked at %s: %s%s", lint_task_or(name),
               (long long)id, lint_at(L, ts), kind == EVL_LEAK_PENDING_AT_CLOSE ? "still pending when its loop closed"
                                                   : "awaits a future that nothing can complete",
               what);
    lint_ev_str(L, "verdict", kname);
    lint_ev_int(L, "leak_ns", ts - L->start);
    if (!col_null(st, 5)) {
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
    const char *name = col_text(st, 1), *awaited = col_text(st, 8);
    const char *waker = col_text(st, 10), *sreason = col_text(st, 11);
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
    } else if (kind == EVL_PROBE_ID_task_suspend && reason == EVL_SUSPEND_TASK && !col_null(st, 9) &&
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
    } else if (kind == EVL_PROBE_ID_task_suspend && !col_null(st, 12) && stop - ls_col_ts(st, 12) >= L->thr) {
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
    const char *name = col_text(st, 1);
    char e[32];
    ls_fmt_err(e, sizeof(e), err);
    bool verdict = !col_null(st, 5);
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
    lint_ev_str(L, "error_name", e);
    if (!col_null(st, 4))
        lint_ev_int(L, "ended_ns", ls_col_ts(st, 4) - L->start);
    if (verdict)
        lint_ev_int(L, "verdict_ns", ls_col_ts(st, 5) - L->start);
    if (!col_null(st, 6)) {
        lint_ev_int(L, "parent_id", sqlite3_column_int64(st, 6));
        lint_ev_str(L, "parent", col_text(st, 7));
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
    const char *name = col_text(st, 1), *kinds = col_text(st, 4);
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
    const char *name = col_text(st, 1);
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
    if (!run_pass(L))
        return false;
    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
        sqlite3_stmt *st = lint_prep(L, rules[i].sql);
        if (!st || !lint_run_rows(L, st, rules[i].row))
            return false;
    }
    return true;
}
