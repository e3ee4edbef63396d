/*
 * lint_pass.c -- the one pass of `loopscope lint` over the events: the
 * task lifecycle events in rowid order (each task's in the order the loop
 * made them) fed to the one replay of task states (model/replay.h), whose
 * spans and marks leave what the task rules (lint_tasks.c) read in small
 * temporary tables.  Depends on lint.h, model/replay.h and ls_codes.h.
 */
#include "lint.h"
#include "ls_codes.h"
#include "replay.h"

#include <stdlib.h>

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
    sqlite3_stmt *st = lint_prep(p->L, "SELECT t.id" LINT_NEVER_CANDIDATES " ORDER BY t.id");
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

bool lint_pass(lint *L)
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
    ls_replay_ops ops = { .on_span = on_span, .on_mark = on_mark, .ctx = &p, .spans_only = true };
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
    /* p lives on this stack: the function goes with it */
    sqlite3_create_function(L->t->db, "lint_feed", 7, SQLITE_UTF8, NULL, NULL, NULL, NULL);
    sqlite3_finalize(ev);
    sqlite3_finalize(lp);
    sqlite3_finalize(p.ins);
    ls_replay_free(r);
    free(p.cand);
    free(p.late);
    return ok;
}

