/*
 * victims.c -- blocking_victims: the tasks each blocking episode delayed.
 *
 * A task is a victim of episode E = [s, e) on its loop when it was woken
 * at w within [s - 1 s, e + 1 s], did not run again until r >= e, and:
 *
 *   ready   it was woken before the episode ended (w < e): ready, waiting
 *           for the loop;
 *   timer   woken by its sleep's timer whose deadline came before e (it
 *           could not fire until the loop was free);
 *   fd      woken for I/O by the first poll after E (px <= w < the poll
 *           after it): its fd became ready at some point before, so the
 *           delay is an upper bound;
 *
 * never the task that blocked.  ready_ns is w, the deadline, or s; the
 * delay runs from max(ready, s) to r.  One row per (episode, task): the
 * earliest ready.
 *
 * One pass over the events (the wake-run pairs are read in order; each is
 * checked against the episodes of its loop that end between w - 1 s and
 * r), instead of a lookup per wake near each episode: with 20 episodes a
 * second on a busy server those were tens of millions.  Nothing is read
 * when there are no episodes.
 */
#include "derive.h"
#include "codes.h"
#include "ls_codes.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define LS_WINDOW_NS 1000000000ll
/* Tasks followed at once; a forged trace may name any number. */
#define LS_VICTIM_TASKS (1u << 22)

typedef struct ls_ep {
    int64_t id, loop, btask;  /* btask 0: a callback blocked */
    int64_t s, e, px, next_poll;
    bool has_px, has_next;
} ls_ep;

typedef struct ls_vtask {
    int64_t id;               /* 0: free slot */
    int64_t wake, deadline;
    int waker;
    bool pending, has_deadline;
} ls_vtask;

typedef struct ls_victim {
    int64_t bid, task, ready, ran, delay, seq;
    int cause;
} ls_victim;

typedef struct ls_vstate {
    ls_ep *eps;
    size_t neps;
    ls_vtask *tasks;
    size_t cap, ntasks;
    ls_victim *out;
    size_t nout, outcap;
    bool oom;
} ls_vstate;

static int ep_cmp(const void *a, const void *b)
{
    const ls_ep *x = a, *y = b;
    if (x->loop != y->loop)
        return x->loop < y->loop ? -1 : 1;
    return x->e < y->e ? -1 : x->e > y->e;
}

static int victim_cmp(const void *a, const void *b)
{
    const ls_victim *x = a, *y = b;
    if (x->ready != y->ready)
        return x->ready < y->ready ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The entry of task id, made if new; NULL when the table is full. */
static ls_vtask *vtask_get(ls_vstate *v, int64_t id)
{
    if (v->ntasks * 2 >= v->cap) {
        if (v->cap >= 2 * (size_t)LS_VICTIM_TASKS)
            goto find;                /* full: known tasks only */
        size_t cap = v->cap ? 2 * v->cap : 1024;
        ls_vtask *t = calloc(cap, sizeof(*t));
        if (!t) {
            v->oom = true;
            goto find;
        }
        for (size_t i = 0; i < v->cap; i++) {
            if (!v->tasks[i].id)
                continue;
            size_t h = ((uint64_t)v->tasks[i].id * 0x9e3779b97f4a7c15ull) & (cap - 1);
            while (t[h].id)
                h = (h + 1) & (cap - 1);
            t[h] = v->tasks[i];
        }
        free(v->tasks);
        v->tasks = t;
        v->cap = cap;
    }
find:
    if (!v->cap)
        return NULL;
    size_t h = ((uint64_t)id * 0x9e3779b97f4a7c15ull) & (v->cap - 1);
    for (size_t n = 0; n < v->cap; n++, h = (h + 1) & (v->cap - 1)) {
        if (v->tasks[h].id == id)
            return &v->tasks[h];
        if (!v->tasks[h].id) {
            if (v->ntasks * 2 >= v->cap)
                return NULL;
            v->ntasks++;
            v->tasks[h] = (ls_vtask){ .id = id };
            return &v->tasks[h];
        }
    }
    return NULL;
}

static void victim_add(ls_vstate *v, const ls_victim *x)
{
    if (v->nout == v->outcap) {
        size_t cap = v->outcap ? 2 * v->outcap : 256;
        ls_victim *o = realloc(v->out, cap * sizeof(*o));
        if (!o) {
            v->oom = true;
            return;
        }
        v->out = o;
        v->outcap = cap;
    }
    v->out[v->nout++] = *x;
}

/* Task t of loop, woken at w (its waker and deadline in k), ran at r:
 * which episodes it was a victim of. */
static void wake_ran(ls_vstate *v, int64_t loop, int64_t task, const ls_vtask *k, int64_t r,
                     int64_t seq)
{
    int64_t w = k->wake;
    /* the first episode of this loop ending at or after w - 1 s */
    size_t lo = 0, hi = v->neps;
    int64_t from = w < INT64_MIN + LS_WINDOW_NS ? INT64_MIN : w - LS_WINDOW_NS;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ls_ep *m = &v->eps[mid];
        if (m->loop < loop || (m->loop == loop && m->e < from))
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < v->neps && v->eps[i].loop == loop && v->eps[i].e <= r; i++) {
        const ls_ep *E = &v->eps[i];
        if (w < (E->s < INT64_MIN + LS_WINDOW_NS ? INT64_MIN : E->s - LS_WINDOW_NS) ||
            task == E->btask)
            continue;
        int cause = 0;
        int64_t ready = E->s;
        if (w < E->e) {
            cause = LS_CAUSE_READY;
            ready = w;
        } else if (k->waker == EVL_WAKER_TIMER && k->has_deadline && k->deadline < E->e) {
            cause = LS_CAUSE_TIMER;
            ready = k->deadline;
        } else if (k->waker == EVL_WAKER_IO && E->has_px && w >= E->px &&
                   (!E->has_next || w < E->next_poll)) {
            cause = LS_CAUSE_FD;
        }
        if (!cause)
            continue;
        int64_t from_ns = ready > E->s ? ready : E->s;
        victim_add(v, &(ls_victim){ .bid = E->id, .task = task, .ready = ready, .ran = r,
                                    .delay = ls_ns_sub(r, from_ns), .seq = seq,
                                    .cause = cause });
    }
}

/* The episodes, with the first poll after each (px: its poll_exit) and
 * the poll after that. */
static const char ls_eps_sql[] =
    "WITH ep AS MATERIALIZED (SELECT id, loop_id, coalesce(task_id, 0) AS btask, start_ns AS s,"
    "   start_ns + dur_ns AS e,"
    "   (SELECT p.ts_ns FROM events p WHERE p.loop_id = blocking.loop_id"
    "     AND p.kind = " LS_SQL_KIND_poll_exit
    "     AND p.ts_ns >= blocking.start_ns + blocking.dur_ns ORDER BY p.ts_ns LIMIT 1) AS px"
    "   FROM blocking)"
    " SELECT id, loop_id, btask, s, e, px, (SELECT q.ts_ns FROM events q"
    "   WHERE q.loop_id = ep.loop_id AND q.kind = " LS_SQL_KIND_poll_enter " AND q.ts_ns > ep.px"
    "   ORDER BY q.ts_ns LIMIT 1) FROM ep";

static const char ls_events_sql[] =
    "SELECT loop_id, task_id, kind, reason, arg0, ts_ns FROM events"
    " WHERE kind IN (" LS_SQL_KIND_task_suspend ", " LS_SQL_KIND_task_wake ", "
    LS_SQL_KIND_task_run ") AND task_id IS NOT NULL ORDER BY rowid";

static int load_eps(sqlite3 *db, ls_vstate *v)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, ls_eps_sql, -1, &st, NULL);
    size_t cap = 0;
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (v->neps == cap) {
            cap = cap ? 2 * cap : 64;
            ls_ep *e = realloc(v->eps, cap * sizeof(*e));
            if (!e) {
                rc = SQLITE_NOMEM;
                break;
            }
            v->eps = e;
        }
        ls_ep *E = &v->eps[v->neps++];
        *E = (ls_ep){ .id = sqlite3_column_int64(st, 0), .loop = sqlite3_column_int64(st, 1),
                      .btask = sqlite3_column_int64(st, 2), .s = sqlite3_column_int64(st, 3),
                      .e = sqlite3_column_int64(st, 4),
                      .has_px = sqlite3_column_type(st, 5) == SQLITE_INTEGER,
                      .px = sqlite3_column_int64(st, 5),
                      .has_next = sqlite3_column_type(st, 6) == SQLITE_INTEGER,
                      .next_poll = sqlite3_column_int64(st, 6), };
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE)
        rc = SQLITE_OK;
    if (rc == SQLITE_OK && v->neps)
        qsort(v->eps, v->neps, sizeof(*v->eps), ep_cmp);
    return rc;
}

static int scan_events(sqlite3 *db, ls_vstate *v)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, ls_events_sql, -1, &st, NULL);
    int64_t seq = 0;
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        int64_t loop = sqlite3_column_int64(st, 0), task = sqlite3_column_int64(st, 1);
        int kind = sqlite3_column_int(st, 2);
        ls_vtask *k = vtask_get(v, task);
        if (!k)
            continue;
        seq++;
        switch (kind) {
        case EVL_PROBE_ID_task_suspend:
            k->has_deadline = sqlite3_column_int64(st, 3) == EVL_SUSPEND_SLEEP &&
                              sqlite3_column_type(st, 4) == SQLITE_INTEGER;
            k->deadline = sqlite3_column_int64(st, 4);
            break;
        case EVL_PROBE_ID_task_wake:
            k->pending = true;
            k->wake = sqlite3_column_int64(st, 5);
            k->waker = (int)sqlite3_column_int64(st, 3);
            break;
        case EVL_PROBE_ID_task_run:
            if (k->pending && sqlite3_column_int64(st, 5) >= k->wake)
                wake_ran(v, loop, task, k, sqlite3_column_int64(st, 5), seq);
            k->pending = false;
            break;
        }
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int store_victims(sqlite3 *db, ls_vstate *v)
{
    qsort(v->out, v->nout, sizeof(*v->out), victim_cmp);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "INSERT OR IGNORE INTO blocking_victims(blocking_id, task_id,"
                                    " ready_ns, ran_ns, delay_ns, cause) VALUES(?,?,?,?,?,?)",
                                -1, &st, NULL);
    for (size_t i = 0; rc == SQLITE_OK && i < v->nout; i++) {
        const ls_victim *x = &v->out[i];
        int64_t vals[] = { x->bid, x->task, x->ready, x->ran, x->delay, x->cause };
        for (int c = 0; c < 6; c++)
            sqlite3_bind_int64(st, c + 1, vals[c]);
        rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(db);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    return rc;
}

int ls_derive_victims(sqlite3 *db)
{
    ls_vstate v = { 0 };
    int rc = sqlite3_exec(db, "DELETE FROM blocking_victims", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = load_eps(db, &v);
    if (rc == SQLITE_OK && v.neps)
        rc = scan_events(db, &v);
    if (rc == SQLITE_OK && v.oom)
        rc = SQLITE_NOMEM;
    if (rc == SQLITE_OK && v.nout)
        rc = store_victims(db, &v);
    free(v.eps);
    free(v.tasks);
    free(v.out);
    return rc;
}
