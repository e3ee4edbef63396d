/*
 * timeline_model.c -- what `loopscope timeline` draws, read from the trace:
 * each shown task's states over the window and the blocking episodes (the
 * tables are described in tracer/SCHEMA.md).  Depends on timeline.h, model/replay.h and
 * ls_codes.h.
 *
 * Spans come from the one replay of task states (model/replay.h), fed each
 * shown task's lifecycle events (task_create .. task_finish) through the
 * index events(task_id, ts_ns): its last event before the window, those in
 * it, and its first one after, which ends the last state (and tells what a
 * task that existed before the recording was doing).  The last state lasts
 * until the loop stopped or the recording ended.  Blocking episodes (table
 * `blocking`) are drawn over the task they happened in and on a row of
 * their loop.
 *
 * Cost is bounded whatever the trace size: a task's events are read only
 * while they are few (EXACT_BUDGET); past that the row is resolved column
 * by column, reading at most CELL_BUDGET events per column plus one index
 * seek to go on from the column's end.  So the work is about tasks x
 * columns, never the number of events.
 */
#define _GNU_SOURCE
#include "timeline.h"
#include "evchunk.h"
#include "codes.h"
#include "ls_codes.h"
#include "replay.h"

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

/* The statements reading a task's lifecycle events, all on the index
 * events(task_id, ts_ns): the last one before a time, the first at or
 * after a time, those in a range, and how many events of any kind are in a
 * range (on the index alone). */
bool tl_prepare_reads(tl *x)
{
#define TL_LIFECYCLE " AND kind BETWEEN " LS_SQL_KIND_task_create " AND " LS_SQL_KIND_task_finish
#define TL_COLS "SELECT ts_ns, kind, reason, arg0, arg1, rowid FROM events WHERE task_id = ?1"
    x->q_before = ls_prepare(x->t, TL_COLS " AND ts_ns < ?2" TL_LIFECYCLE
                                   " ORDER BY ts_ns DESC, rowid DESC LIMIT 1");
    x->q_after = !x->q_before ? NULL : ls_prepare(x->t, TL_COLS " AND ts_ns >= ?2" TL_LIFECYCLE
                                                        " ORDER BY ts_ns, rowid LIMIT 1");
    x->q_range = !x->q_after ? NULL : ls_prepare(x->t, TL_COLS " AND ts_ns >= ?2 AND ts_ns < ?3"
                                                       TL_LIFECYCLE " ORDER BY ts_ns, rowid LIMIT ?4");
    x->q_count = !x->q_range ? NULL : ls_prepare(x->t, "SELECT count(*) FROM (SELECT 1 FROM events"
                                 " WHERE task_id = ?1 AND ts_ns >= ?2 AND ts_ns < ?3 LIMIT ?4)");
#undef TL_COLS
#undef TL_LIFECYCLE
    return x->q_before && x->q_after && x->q_range && x->q_count;
}

/* Reading one lane: its replay and, for a binned lane, its columns. */
typedef struct rd {
    tl *x;
    lane *ln;
    ls_replay *r;
    int64_t end;                 /* min(alive_end, window end) */
    int64_t last_rowid;          /* the last event fed, or -1 */
    /* binned: per column, the highest state touching it (and why), the
     * running time in it, and where reading stopped (-1: read it all) */
    int ncols;
    double q;
    unsigned char *best;
    const char **why;
    double *run;
    int64_t *cut;
} rd;

/* Column c of a binned lane: [a, b), as the terminal and SVG cut them. */
static int64_t col_a(const rd *d, int c)
{
    return d->x->from + (int64_t)(d->q * c);
}

static int64_t col_b(const rd *d, int c)
{
    int64_t b = c + 1 == d->ncols ? d->x->to : col_a(d, c + 1);
    return b < d->ln->alive_end ? b : d->ln->alive_end;
}

/* The last column starting at or before ts (0 before the window). */
static int col_at(const rd *d, int64_t ts)
{
    int c = (int)((double)(ts - d->x->from) / d->q);
    if (c < 0)
        c = 0;
    if (c >= d->ncols)
        c = d->ncols - 1;
    while (c > 0 && col_a(d, c) > ts)
        c--;
    while (c + 1 < d->ncols && col_a(d, c + 1) <= ts)
        c++;
    return c;
}

/* A span of the replay (model/replay.h): created and woken tasks are
 * ready, with why; a pre-existing task's first span says so. */
static void on_span(void *ctx, const ls_span *s)
{
    rd *d = ctx;
    tl *x = d->x;
    int st = s->state == EVL_FINAL_RUNNING ? ST_RUN
             : s->state == EVL_FINAL_SUSPENDED ? ST_SUSP : ST_READY;
    const char *why = s->node == LS_NODE_PREEXISTING ? "existed before the recording"
                      : s->node == LS_NODE_CREATED ? "created"
                      : st == ST_SUSP ? name_of(x->susp_names, 32, s->detail)
                      /* waker kind 0: a census cannot tell who woke it */
                      : s->state == EVL_FINAL_READY && s->node == LS_NODE_READY && !s->detail
                      ? "woken, waker unknown"
                      : s->state == EVL_FINAL_READY ? name_of(x->wake_names, 32, s->detail)
                      : NULL;
    if (!d->best) {                      /* exact: the span, clipped to the window */
        int64_t a = s->start > x->from ? s->start : x->from, b = s->end < d->end ? s->end : d->end;
        if (b > a)
            spans_push(&d->ln->st, (span){ a, b, st, why, -1, st == ST_RUN ? 1000 : 0 });
        return;
    }
    /* binned: every column it touches -- it started before the column's
     * end and ended at or after its start (so the state a column starts
     * in counts, and an instant state too) -- unless it started after the
     * point where that column's reading stopped. */
    if (s->end < x->from || s->start >= d->end)
        return;
    int c0 = s->start < x->from ? 0 : col_at(d, s->start), c1 = col_at(d, s->end);
    for (int c = c0; c <= c1; c++) {
        int64_t a = col_a(d, c), b = col_b(d, c);
        if (a >= d->ln->alive_end)
            break;
        if (s->start >= b || s->end < a || (d->cut[c] >= 0 && s->start > d->cut[c]))
            continue;
        if (st > d->best[c]) {
            d->best[c] = (unsigned char)st;
            d->why[c] = why;
        }
        int64_t hi = d->cut[c] >= 0 ? d->cut[c] : b;
        int64_t lo = s->start > a ? s->start : a, e = s->end < hi ? s->end : hi;
        if (st == ST_RUN && e > lo)
            d->run[c] += (double)(e - lo);
    }
}

/* Feed the row q is on to the replay (unless it was fed already). */
static void feed(rd *d, sqlite3_stmt *q)
{
    int64_t rowid = sqlite3_column_int64(q, 5);
    if (rowid == d->last_rowid)
        return;
    d->last_rowid = rowid;
    ls_event e = { .ts = ls_col_ts(q, 0), .loop = (uint64_t)d->ln->loop,
                   .task = (uint64_t)d->ln->id, .kind = sqlite3_column_int(q, 1),
                   .reason = sqlite3_column_int64(q, 2), .arg0 = sqlite3_column_int64(q, 3),
                   .arg1 = sqlite3_column_int64(q, 4) };
    ls_replay_event(d->r, &e);
}

/* Feed the task's last lifecycle event before ts (q_before) or its first
 * at or after ts (q_after). */
static void feed_one(rd *d, sqlite3_stmt *q, int64_t ts)
{
    sqlite3_reset(q);
    sqlite3_bind_int64(q, 1, d->ln->id);
    sqlite3_bind_int64(q, 2, ts);
    if (sqlite3_step(q) == SQLITE_ROW)
        feed(d, q);
}

/* Feed at most limit events in [a, b); returns how many there were. */
static int feed_range(rd *d, int64_t a, int64_t b, int limit, int64_t *last_ts)
{
    sqlite3_stmt *q = d->x->q_range;
    sqlite3_reset(q);
    sqlite3_bind_int64(q, 1, d->ln->id);
    sqlite3_bind_int64(q, 2, a);
    sqlite3_bind_int64(q, 3, b);
    sqlite3_bind_int64(q, 4, limit);
    int n = 0;
    while (n < limit && sqlite3_step(q) == SQLITE_ROW) {
        n++;
        *last_ts = ls_col_ts(q, 0);
        feed(d, q);
    }
    return n;
}

static bool rd_begin(rd *d, tl *x, lane *ln)
{
    *d = (rd){ .x = x, .ln = ln, .last_rowid = -1,
               .end = ln->alive_end < x->to ? ln->alive_end : x->to };
    ls_replay_ops ops = { .on_span = on_span, .ctx = d, .spans_only = true };
    d->r = ls_replay_new(&ops, 4);
    if (!d->r)
        ls_error("out of memory");
    return d->r != NULL;
}

/* The end of a lane's reading: its state until the window's end is told by
 * the task's next event after it (a pre-existing task's first one too). */
static void rd_end(rd *d, int64_t after)
{
    feed_one(d, d->x->q_after, after);
    ls_replay_end(d->r, d->end);
    ls_replay_free(d->r);
}

/* Exact spans of a task: the replay of its event before the window, those
 * in it and the one after; false if it has more than EXACT_BUDGET events
 * in the window (then tl_bin_task draws it). */
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
    rd d;
    if (!rd_begin(&d, x, ln))
        return true;
    int64_t t;
    feed_one(&d, x->q_before, x->from);
    feed_range(&d, x->from, x->to, EXACT_BUDGET + 1, &t);
    rd_end(&d, x->to);
    return true;
}

/* A busy task, resolved column by column at ncols columns: each column
 * becomes one span of the highest-ranked state seen in it, with the share
 * of the column the task was running.  At most CELL_BUDGET events are read
 * per column; when there are more, the running share is the one of the
 * part read, and the replay goes on from the task's last event before the
 * column's end (one seek). */
void tl_bin_task(tl *x, lane *ln, int ncols)
{
    rd d;
    if (!rd_begin(&d, x, ln))
        return;
    d.ncols = ncols;
    d.q = (double)(x->to - x->from) / ncols;
    d.best = calloc((size_t)ncols, 1);
    d.why = calloc((size_t)ncols, sizeof(*d.why));
    d.run = calloc((size_t)ncols, sizeof(*d.run));
    d.cut = malloc((size_t)ncols * sizeof(*d.cut));
    ln->binned = true;
    if (!d.best || !d.why || !d.run || !d.cut) {
        ls_error("out of memory");
        ls_replay_free(d.r);
        goto out;
    }
    for (int c = 0; c < ncols; c++)
        d.cut[c] = -1;
    feed_one(&d, x->q_before, x->from);
    int64_t after = x->to;
    int last = -1;
    for (int c = 0; c < ncols; c++) {
        int64_t a = col_a(&d, c), b = col_b(&d, c), t = a;
        if (a >= ln->alive_end)
            break;
        last = c;
        after = b;
        if (feed_range(&d, a, b, CELL_BUDGET, &t) == CELL_BUDGET) {   /* more than read */
            d.cut[c] = t;
            feed_one(&d, x->q_before, b);
        }
    }
    rd_end(&d, after);
    for (int c = 0; c <= last; c++) {
        int64_t a = col_a(&d, c), b = col_b(&d, c);
        double run = d.run[c];
        if (d.cut[c] >= 0)
            run = d.cut[c] > a ? run * (double)(b - a) / (double)(d.cut[c] - a) : 0;
        if (d.best[c] != ST_NONE && b > a)
            spans_push(&ln->st, (span){ a, b, d.best[c], d.why[c], -1,
                                        (int)((double)(int64_t)run * 1000 / (double)(b - a)) });
    }
out:
    free(d.best);
    free(d.why);
    free(d.run);
    free(d.cut);
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
        const char *why = kind == LS_BLOCK_ONCPU ? "on-cpu: a long step" : sys ? sys : "off-cpu";
        span sp = { s < x->from ? x->from : s, e > x->to ? x->to : e, ST_BLOCK, why, task, 0 };
        span on_task = sp;
        if (x->generic) {                /* the asyncio task by name, not its id */
            const char *tn = (const char *)sqlite3_column_text(st, 6);
            sp.reason = keep(x, kind == LS_BLOCK_ONCPU ? "on-cpu" : sys ? sys : "off-cpu", tn);
            sp.arg = -1;
            on_task.reason = kind == LS_BLOCK_ONCPU ? "on-cpu" : sys ? sys : "off-cpu";
        }
        for (size_t i = 0; i < x->nlanes; i++) {
            lane *ln = &x->lanes[i];
            if (ln->is_loop && ln->id == loop)
                spans_push(&ln->blk, sp);
            else if (!ln->is_loop && has_task && ln->id == task)   /* a census's task row */
                spans_push(&ln->blk, on_task);
        }
    }
    bool ok = ls_step_ok(x->t, st, rc);
    sqlite3_finalize(st);
    return ok;
}

/* The trace's first and last event times (absolute); false if none. */
bool tl_event_bounds(tl *x, int64_t *first, int64_t *last)
{
    /* From the chunks' bounds (model/evchunk.h), not a scan of events. */
    sqlite3_stmt *a = ls_prepare(x->t, "SELECT " LS_SQL_EVENTS_MIN_TS);
    sqlite3_stmt *b = ls_prepare(x->t, "SELECT " LS_SQL_EVENTS_MAX_TS);
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
