/*
 * timeline_model.c -- what `loopscope timeline` draws, read from the trace:
 * each shown task's states over the window and the blocking episodes (the
 * tables are described in tracer/SCHEMA.md).  Depends on timeline.h.
 *
 * Spans come from the task's lifecycle events (kinds 3-7): create and wake
 * start "ready", run starts "running", suspend starts "suspended" and
 * finish ends the task; the last state lasts until the loop stopped or the
 * recording ended.  Blocking episodes (table `blocking`) are drawn over the
 * task they happened in and on a row of their loop.
 *
 * Cost is bounded whatever the trace size: a task's events are read only
 * while they are few (EXACT_BUDGET); past that the row is resolved column
 * by column, reading at most CELL_BUDGET events per column plus one index
 * seek for the state at the column's end.  So the work is about tasks x
 * columns, never the number of events.
 */
#define _GNU_SOURCE
#include "timeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXACT_BUDGET 2000    /* a task with more events in the window is binned */
#define CELL_BUDGET 4        /* events read per column of a binned task */

static void spans_push(spans *s, span x)
{
    if (s->n && s->v[s->n - 1].st == x.st && s->v[s->n - 1].e == x.s && x.st != ST_BLOCK &&
        s->v[s->n - 1].reason == x.reason && s->v[s->n - 1].run_pm == x.run_pm) {
        s->v[s->n - 1].e = x.e;          /* same state continues */
        return;
    }
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        if (!s->v) {
            fputs("error: out of memory\n", stderr);
            exit(1);
        }
    }
    s->v[s->n++] = x;
}
/* ------------------------------------------------------------ reading */

/* Fill a by-id name table from a lookup table (ids beyond n are ignored). */
bool tl_load_names(tl *x, const char *sql, char **names, size_t n)
{
    sqlite3_stmt *st = ls_prepare(x->t, sql);
    if (!st)
        return false;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0);
        const char *s = (const char *)sqlite3_column_text(st, 1);
        if (id >= 0 && (size_t)id < n && s && !names[id])
            names[id] = strdup(s);
    }
    bool ok = ls_step_ok(x->t, st, rc);
    sqlite3_finalize(st);
    return ok;
}

static const char *name_of(char **names, size_t n, int64_t id)
{
    return id >= 0 && (size_t)id < n && names[id] ? names[id] : NULL;
}

/* The state a lifecycle event starts, and why. */
static int event_state(tl *x, int kind, int64_t reason, const char **why)
{
    *why = NULL;
    switch (kind) {
    case 3:
        *why = reason == 1 ? "existed before the recording" : "created";
        return ST_READY;
    case 4:
        return ST_RUN;
    case 5:
        *why = name_of(x->susp_names, 32, reason);
        return ST_SUSP;
    case 6:
        *why = name_of(x->wake_names, 32, reason);
        return ST_READY;
    default:
        return ST_NONE;                  /* 7 task_finish */
    }
}

/* A task that existed before the recording gets a task_create at attach;
 * what it was doing then shows in its next event: a wake means it was
 * suspended, a run that it was ready.  Returns the state to draw. */
static int preexisting_state(tl *x, int64_t task, int64_t ts)
{
    sqlite3_stmt *q = x->q_after;
    sqlite3_reset(q);
    sqlite3_bind_int64(q, 1, task);
    sqlite3_bind_int64(q, 2, ts);
    int kind = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int(q, 0) : 0;
    return kind == 4 ? ST_READY : ST_SUSP;
}

/* The state of a task at absolute time ts (its last lifecycle event before
 * ts); ST_NONE before its creation. */
static int state_at(tl *x, int64_t task, int64_t ts, const char **why)
{
    sqlite3_stmt *q = x->q_before;
    sqlite3_reset(q);
    sqlite3_bind_int64(q, 1, task);
    sqlite3_bind_int64(q, 2, ts);
    *why = NULL;
    if (sqlite3_step(q) != SQLITE_ROW)
        return ST_NONE;
    int kind = sqlite3_column_int(q, 1);
    int64_t reason = sqlite3_column_int64(q, 2), at = ls_col_ts(q, 0);
    int st = event_state(x, kind, reason, why);
    if (kind == 3 && reason == 1)
        st = preexisting_state(x, task, at);
    return st;
}

/* Exact spans of a task from its events in the window; false if it has
 * more than EXACT_BUDGET of them (then tl_bin_task draws it). */
bool tl_exact_task(tl *x, lane *ln)
{
    /* Count first, on the index alone: reading the rows of a busy task
     * only to give up would cost a table lookup each. */
    sqlite3_stmt *qc = x->q_count;
    sqlite3_reset(qc);
    sqlite3_bind_int64(qc, 1, ln->id);
    sqlite3_bind_int64(qc, 2, x->from);
    sqlite3_bind_int64(qc, 3, x->to);
    sqlite3_bind_int64(qc, 4, EXACT_BUDGET + 1);
    if (sqlite3_step(qc) != SQLITE_ROW || sqlite3_column_int64(qc, 0) > EXACT_BUDGET)
        return false;
    const char *why;
    int cur = state_at(x, ln->id, x->from, &why);
    int64_t cur_s = x->from, end = ln->alive_end < x->to ? ln->alive_end : x->to;
    sqlite3_stmt *q = x->q_range;
    sqlite3_reset(q);
    sqlite3_bind_int64(q, 1, ln->id);
    sqlite3_bind_int64(q, 2, x->from);
    sqlite3_bind_int64(q, 3, x->to);
    sqlite3_bind_int64(q, 4, EXACT_BUDGET + 1);
    /* Read first, then build: a pre-existing task's create needs the next
     * event, which is the next row. */
    struct ev { int64_t ts, reason; int kind; } *ev = malloc((EXACT_BUDGET + 1) * sizeof(*ev));
    if (!ev)
        return false;
    int n = 0;
    while (sqlite3_step(q) == SQLITE_ROW && n <= EXACT_BUDGET)
        ev[n++] = (struct ev){ ls_col_ts(q, 0), sqlite3_column_int64(q, 2),
                               sqlite3_column_int(q, 1) };
    if (n > EXACT_BUDGET) {
        free(ev);
        return false;
    }
    for (int i = 0; i < n; i++) {
        const char *w;
        int st = event_state(x, ev[i].kind, ev[i].reason, &w);
        if (ev[i].kind == 3 && ev[i].reason == 1)
            st = i + 1 < n ? (ev[i + 1].kind == 4 ? ST_READY : ST_SUSP)
                           : preexisting_state(x, ln->id, ev[i].ts);
        int64_t ts = ev[i].ts < end ? ev[i].ts : end;
        if (cur != ST_NONE && ts > cur_s)
            spans_push(&ln->st, (span){ cur_s, ts, cur, why, -1, cur == ST_RUN ? 1000 : 0 });
        cur = st;
        why = w;
        cur_s = ev[i].ts;
    }
    if (cur != ST_NONE && end > cur_s)
        spans_push(&ln->st, (span){ cur_s, end, cur, why, -1, cur == ST_RUN ? 1000 : 0 });
    free(ev);
    return true;
}

/* A busy task, resolved column by column at ncols columns: each column
 * becomes one span of the highest-ranked state seen in it, with the share
 * of the column the task was running.  At most CELL_BUDGET events are read
 * per column; when there are more, the running share is the one of the
 * part read, and the state at the column's end is found with one seek. */
void tl_bin_task(tl *x, lane *ln, int ncols)
{
    const char *why;
    int cur = state_at(x, ln->id, x->from, &why);
    double q = (double)(x->to - x->from) / ncols;
    sqlite3_stmt *qr = x->q_range;
    ln->binned = true;
    for (int c = 0; c < ncols; c++) {
        int64_t a = x->from + (int64_t)(q * c);
        int64_t b = c + 1 == ncols ? x->to : x->from + (int64_t)(q * (c + 1));
        if (a >= ln->alive_end)
            break;
        if (b > ln->alive_end)
            b = ln->alive_end;
        int best = cur;
        const char *best_why = why;
        int64_t t = a, run = 0;
        sqlite3_reset(qr);
        sqlite3_bind_int64(qr, 1, ln->id);
        sqlite3_bind_int64(qr, 2, a);
        sqlite3_bind_int64(qr, 3, b);
        sqlite3_bind_int64(qr, 4, CELL_BUDGET);
        int n = 0;
        while (sqlite3_step(qr) == SQLITE_ROW) {
            n++;
            int64_t ts = ls_col_ts(qr, 0), reason = sqlite3_column_int64(qr, 2);
            int kind = sqlite3_column_int(qr, 1);
            if (cur == ST_RUN)
                run += ts - t;
            t = ts;
            cur = event_state(x, kind, reason, &why);
            if (kind == 3 && reason == 1)
                cur = preexisting_state(x, ln->id, ts);
            if (cur > best) {
                best = cur;
                best_why = why;
            }
        }
        if (n == CELL_BUDGET) {          /* more events than read */
            run = t > a ? (int64_t)((double)run * (double)(b - a) / (double)(t - a)) : 0;
            cur = state_at(x, ln->id, b, &why);
        } else if (cur == ST_RUN) {
            run += b - t;
        }
        if (best != ST_NONE && b > a)
            spans_push(&ln->st, (span){ a, b, best, best_why, -1,
                                        (int)((double)run * 1000 / (double)(b - a)) });
    }
}

/* A title kept until the end: "what in asyncio task NAME" (name may be
 * NULL); NULL when out of memory. */
static const char *keep(tl *x, const char *what, const char *task)
{
    char *s = NULL, **v = realloc(x->owned, (x->nowned + 1) * sizeof(*v));
    if (!v)
        return NULL;
    x->owned = v;
    if (asprintf(&s, "%s%s%s", what, task ? " in asyncio task " : "", task ? task : "") < 0)
        return NULL;
    return x->owned[x->nowned++] = s;
}

/* Blocking episodes overlapping the window, onto their task's lane and
 * their loop's lane. */
bool tl_load_blocking(tl *x)
{
    sqlite3_stmt *st = ls_prepare(x->t,
        "SELECT b.start_ns, b.dur_ns, b.loop_id, b.task_id, b.kind, b.syscall, t.name"
        " FROM blocking b LEFT JOIN tasks t ON t.id = b.task_id"
        " WHERE b.start_ns < ?2 AND b.start_ns + b.dur_ns > ?1 ORDER BY b.start_ns, b.id");
    if (!st)
        return false;
    sqlite3_bind_int64(st, 1, x->from);
    sqlite3_bind_int64(st, 2, x->to);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t s = ls_col_ts(st, 0), e = s + ls_col_ts(st, 1);
        int64_t loop = sqlite3_column_int64(st, 2);
        bool has_task = sqlite3_column_type(st, 3) != SQLITE_NULL;
        int64_t task = has_task ? sqlite3_column_int64(st, 3) : -1;
        int kind = sqlite3_column_int(st, 4);
        const char *sys = sqlite3_column_type(st, 5) == SQLITE_NULL ? NULL
                          : name_of(x->sys_names, 512, sqlite3_column_int64(st, 5));
        const char *why = kind == 2 ? "on-cpu: a long step" : sys ? sys : "off-cpu";
        if (x->generic) {                /* the asyncio task by name, not its address */
            const char *tn = (const char *)sqlite3_column_text(st, 6);
            why = keep(x, kind == 2 ? "on-cpu" : sys ? sys : "off-cpu", tn);
            task = -1;
        }
        span sp = { s < x->from ? x->from : s, e > x->to ? x->to : e, ST_BLOCK, why, task, 0 };
        for (size_t i = 0; i < x->nlanes; i++) {
            lane *ln = &x->lanes[i];
            if ((ln->is_loop && ln->id == loop) || (!ln->is_loop && has_task && ln->id == task))
                spans_push(&ln->blk, sp);
        }
    }
    bool ok = ls_step_ok(x->t, st, rc);
    sqlite3_finalize(st);
    return ok;
}

/* The trace's first and last event times (absolute); false if none. */
bool tl_event_bounds(tl *x, int64_t *first, int64_t *last)
{
    /* Two statements: SQLite answers a lone min() or max() with one index
     * seek, but both in one SELECT with a scan. */
    sqlite3_stmt *a = ls_prepare(x->t, "SELECT min(ts_ns) FROM events");
    sqlite3_stmt *b = ls_prepare(x->t, "SELECT max(ts_ns) FROM events");
    bool ok = a && b && sqlite3_step(a) == SQLITE_ROW && sqlite3_column_type(a, 0) != SQLITE_NULL &&
              sqlite3_step(b) == SQLITE_ROW;
    if (ok) {
        *first = ls_col_ts(a, 0);
        *last = ls_col_ts(b, 0);
    }
    sqlite3_finalize(a);
    sqlite3_finalize(b);
    return ok;
}
