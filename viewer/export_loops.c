/*
 * export_loops.c -- the export's loops (export_model.h): a track per loop
 * (a process) and its thread with "idle (epoll_wait)" from poll_enter to
 * poll_exit, "iteration" from poll_exit to the next poll_enter, "callback"
 * for plain callbacks inside it and the blocking episodes outside tasks
 * inside those; loop_start/loop_stop instants; in the generic loop mode
 * (tracer/SCHEMA.md: no lifecycle) every episode on its thread's track and
 * the iteration windows (loop_windows) as counters.  The loop events are
 * the export's own (they are not task states); the walk is export_model.c.
 */
#define _GNU_SOURCE
#include "codes.h"
#include "evl-probes.h"
#include "export_model.h"
#include "loopstat.h"
#include "output.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

const char x_episodes_sql[] =
    "SELECT b.id, b.task_id, b.loop_id, b.start_ns, b.dur_ns, b.kind, y.name,"
    "  s.file, s.line, s.function, b.delayed_tasks,"
    "  (SELECT group_concat(n, ', ') FROM (SELECT coalesce(t.name, '?') || ' (id ' || v.task_id"
    "     || ')' AS n FROM blocking_victims v LEFT JOIN tasks t ON t.id = v.task_id"
    "     WHERE v.blocking_id = b.id ORDER BY v.delay_ns DESC, v.task_id)),"
    "  (SELECT name FROM tasks WHERE id = b.task_id)"
    " FROM blocking b LEFT JOIN syscalls y ON y.nr = b.syscall"
    " LEFT JOIN sites s ON s.stack_id = b.stack_id"
    " WHERE %s ORDER BY %sb.start_ns, b.id";

static char *col_dup(sqlite3_stmt *st, int i)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? strdup((const char *)s) : NULL;
}

void x_episode_read(sqlite3_stmt *st, episode *e)
{
    e->id = sqlite3_column_int64(st, 0);
    e->task_id = sqlite3_column_type(st, 1) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 1);
    e->loop_id = sqlite3_column_int64(st, 2);
    e->start = ls_col_ts(st, 3);
    e->dur = ls_col_ts(st, 4);
    e->kind = sqlite3_column_int64(st, 5);
    e->syscall = col_dup(st, 6);
    const char *file = (const char *)sqlite3_column_text(st, 7);
    const char *fn = (const char *)sqlite3_column_text(st, 9);
    e->site = NULL;
    if (file && asprintf(&e->site, "%s:%d %s", ls_short_path(file), sqlite3_column_int(st, 8),
                         fn ? fn : "?") < 0)
        e->site = NULL;
    else if (!file && fn)
        e->site = strdup(fn);
    e->delayed = sqlite3_column_int64(st, 10);
    e->victims = col_dup(st, 11);
    e->task = col_dup(st, 12);
    e->next = NULL;
}

void x_episode_free(episode *e)
{
    free(e->syscall);
    free(e->site);
    free(e->victims);
    free(e->task);
}

int x_error_args(ls_xarg *a, int64_t err)
{
    a[0] = (ls_xarg){ "error", LS_XA_INT, .i = err };
    const char *name = err < 0 && err > -4096 ? strerrorname_np((int)-err) : NULL;
    if (!name)
        return 1;
    a[1] = (ls_xarg){ "error_name", LS_XA_NAME, .s = name };
    return 2;
}

void x_episode_write(exporter *x, const episode *e, ls_xtrack *t, int64_t lo, int64_t hi,
                     int64_t *prev_end)
{
    int64_t a = e->start, b = e->start + e->dur;
    if (a < lo)
        a = lo;
    if (a < *prev_end)
        a = *prev_end;
    if (b > hi)
        b = hi;
    if (b < a)
        return;
    *prev_end = b;
    bool oncpu = e->kind == LS_BLOCK_ONCPU;
    char name[96];
    snprintf(name, sizeof(name), "BLOCKING %s%s%s", oncpu ? "on-cpu" : "off-cpu",
             e->syscall ? " " : "", e->syscall ? e->syscall : "");
    ls_xarg args[8];
    int n = 0;
    args[n++] = (ls_xarg){ "episode", LS_XA_INT, .i = e->id };
    args[n++] = (ls_xarg){ "kind", LS_XA_NAME, .s = oncpu ? "on-cpu" : "off-cpu" };
    if (e->syscall)
        args[n++] = (ls_xarg){ "syscall", LS_XA_NAME, .s = e->syscall };
    args[n++] = (ls_xarg){ "site", LS_XA_STR, .s = e->site ? e->site : "(no application frame)" };
    args[n++] = (ls_xarg){ "held_ms", LS_XA_MS, .i = e->dur };
    if (x->generic && e->task)
        args[n++] = (ls_xarg){ "asyncio_task", LS_XA_STR, .s = e->task };
    if (!x->generic)
        args[n++] = (ls_xarg){ "delayed_tasks", LS_XA_INT, .i = e->delayed };
    if (e->victims)
        args[n++] = (ls_xarg){ "delayed", LS_XA_STR, .s = e->victims };
    ls_xev ev = { .name = name, .name_tmp = true, .cat = "blocking", .cname = "terrible",
                  .args = args, .nargs = n };
    x_slice(x, t, a, b, &ev);
}

xloop *x_loop(exporter *x, int64_t id)
{
    for (size_t i = 0; i < x->nloops; i++)
        if (x->loops[i].id == id)
            return &x->loops[i];
    return NULL;
}

/* Load the loops (and declare their tracks) and the episodes outside tasks. */
bool x_loops_load(exporter *x)
{
    sqlite3_stmt *st = ls_prepare(x->t,
        "SELECT id, tid, coalesce(started_ns, 0), coalesce(stopped_ns, 0),"
        "  EXISTS (SELECT 1 FROM tasks WHERE tasks.id = loops.tid), pid FROM loops ORDER BY id");
    if (!st)
        return false;
    int rc;
    bool clash = false, group = ls_trace_group(x->t);
    size_t cap = 0;                   /* of x->loops */
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!ls_grow((void **)&x->loops, &cap, x->nloops + 1, sizeof(*x->loops)))
            break;
        xloop *l = &x->loops[x->nloops++];
        *l = (xloop){ .id = sqlite3_column_int64(st, 0), .os_tid = sqlite3_column_int64(st, 1),
                      .started = ls_col_ts(st, 2), .stopped = ls_col_ts(st, 3), .poll_ts = -1,
                      .iter_ts = -1, .cb_ts = -1,
                      .pid = group ? sqlite3_column_int64(st, 5) : 0 };
        clash |= sqlite3_column_int(st, 4) != 0;
    }
    bool ok = ls_step_ok(x->t, st, rc);
    sqlite3_finalize(st);
    /* Viewers key threads by tid: when a loop's OS tid equals a task id,
     * move the loop tracks above every task id (names keep the real tid). */
    int64_t off = 0;
    if (clash) {
        st = ls_prepare(x->t, "SELECT coalesce(max(id), 0) + 1 FROM tasks");
        if (st && sqlite3_step(st) == SQLITE_ROW)
            off = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    char name[96];
    for (size_t i = 0; i < x->nloops; i++) {   /* ids are anything: wrap, not overflow */
        xloop *l = &x->loops[i];
        l->track_tid = off ? (int64_t)((uint64_t)off + (uint64_t)l->id) : l->os_tid;
        uint64_t u = (uint64_t)(i + 1) * 8;     /* task tracks: id * 8 + 7 */
        l->proc = (ls_xtrack){ LS_XT_LOOP, u + 1, 0, l->id, l->track_tid, l->id, 0, { 0 } };
        l->thread = (ls_xtrack){ LS_XT_THREAD, u + 2, u + 1, l->id, l->track_tid, -1, 0, { 0 } };
        for (int k = 0; k < XL_SERIES; k++)
            l->series[k] = (ls_xtrack){ LS_XT_COUNTER, u + 3 + (uint64_t)k, u + 1, l->id,
                                        l->track_tid, -1, 0, { 0 } };
        char proc[40] = "";           /* a process group's: whose */
        if (l->pid)
            snprintf(proc, sizeof(proc), " of pid %" PRId64, l->pid);
        if (x->generic)
            snprintf(name, sizeof(name), "loop thread %" PRId64 "%s", l->os_tid, proc);
        else
            snprintf(name, sizeof(name), "loop %" PRId64 " (tid %" PRId64 ")%s", l->id, l->os_tid,
                     proc);
        x->w->ops->track(x->w, &l->proc, name);
        snprintf(name, sizeof(name), "event loop (tid %" PRId64 ")", l->os_tid);
        x->w->ops->track(x->w, &l->thread, name);
    }
    if (!ok)
        return false;

    /* Generic mode: every episode on its loop thread's track, by start. */
    char sql[sizeof(x_episodes_sql) + 64];
    snprintf(sql, sizeof(sql), x_episodes_sql, x->generic ? "1" : "b.task_id IS NULL", "");
    if (!(st = ls_prepare(x->t, sql)))
        return false;
    size_t ecap = 0;                  /* of x->cb_blocking */
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!ls_grow((void **)&x->cb_blocking, &ecap, x->ncb + 1, sizeof(*x->cb_blocking)))
            break;
        x_episode_read(st, &x->cb_blocking[x->ncb++]);
    }
    ok = ls_step_ok(x->t, st, rc);
    sqlite3_finalize(st);
    return ok;
}

void x_loops_free(exporter *x)
{
    for (size_t i = 0; i < x->ncb; i++)
        x_episode_free(&x->cb_blocking[i]);
    free(x->cb_blocking);
    free(x->loops);
}

/* Episodes outside tasks that start before `hi`, inside the callback. */
static void loop_drain_blocking(exporter *x, xloop *l, int64_t lo, int64_t hi)
{
    int64_t prev = lo;
    for (; l->blk_next < x->ncb; l->blk_next++) {
        episode *e = &x->cb_blocking[l->blk_next];
        if (e->loop_id != l->id)
            continue;
        if (e->start >= hi)
            break;
        x_episode_write(x, e, &l->thread, lo, hi, &prev);
    }
}

static void loop_close_idle(exporter *x, xloop *l, int64_t ts)
{
    if (l->poll_ts < 0)
        return;
    ls_xarg a = l->poll_timeout < 0 ? (ls_xarg){ "timeout", LS_XA_NAME, .s = "infinite" }
                                    : (ls_xarg){ "timeout_ms", LS_XA_MS, .i = l->poll_timeout };
    ls_xev e = { .name = "idle (epoll_wait)", .cat = "idle", .cname = "grey", .args = &a,
                 .nargs = 1 };
    x_slice(x, &l->thread, l->poll_ts, ts, &e);
    l->poll_ts = -1;
}

static void loop_callback(exporter *x, xloop *l, int64_t ts)
{
    ls_xarg a = { "function", LS_XA_HEX, .i = l->cb_addr };
    ls_xev e = { .name = "callback", .cat = "callback", .args = &a, .nargs = 1 };
    x_slice(x, &l->thread, l->cb_ts, ts, &e);
}

static void loop_close_iter(exporter *x, xloop *l, int64_t ts)
{
    if (l->iter_ts >= 0) {
        ls_xarg a[2] = { { "iteration", LS_XA_INT, .i = l->iter_n },
                         { "ready_fds", LS_XA_INT, .i = l->iter_fds } };
        ls_xev e = { .name = "iteration", .cat = "iteration", .args = a, .nargs = 2 };
        x_slice(x, &l->thread, l->iter_ts, ts, &e);
        l->iter_ts = -1;
    }
    if (l->cb_ts >= 0) {                    /* a callback cut short (loop stop) */
        loop_callback(x, l, ts);
        l->cb_ts = -1;
    }
}

/* One loop-level event (task_id NULL). */
void x_loop_event(exporter *x, xloop *l, int64_t ts, int kind, int64_t reason, int64_t arg0)
{
    switch (kind) {
    case EVL_PROBE_ID_loop_start:
    case EVL_PROBE_ID_loop_stop: {
        if (kind == EVL_PROBE_ID_loop_stop) {
            loop_close_idle(x, l, ts);
            loop_close_iter(x, l, ts);
        }
        ls_xarg a = { "tid", LS_XA_INT, .i = reason };
        ls_xev e = { .name = kind == EVL_PROBE_ID_loop_start ? "loop_start" : "loop_stop",
                     .cat = "loop", .args = &a, .nargs = 1 };
        x_instant(x, &l->thread, ts, &e);
        break;
    }
    case EVL_PROBE_ID_poll_enter:
        loop_close_iter(x, l, ts);
        l->poll_ts = ts;
        l->poll_timeout = arg0;
        break;
    case EVL_PROBE_ID_poll_exit:
        loop_close_idle(x, l, ts);
        l->iter_ts = ts;
        l->iter_fds = reason;
        l->iter_n++;
        break;
    case EVL_PROBE_ID_callback_begin:
        l->cb_ts = ts;
        l->cb_addr = arg0;
        break;
    case EVL_PROBE_ID_callback_end:
        if (l->cb_ts >= 0) {
            loop_callback(x, l, ts);
            loop_drain_blocking(x, l, l->cb_ts, ts);
        }
        l->cb_ts = -1;
        break;
    }
}

void x_loops_finish(exporter *x)
{
    for (size_t i = 0; i < x->nloops; i++) {
        xloop *l = &x->loops[i];
        int64_t end = l->stopped > 0 ? l->stopped : x->end;
        loop_close_idle(x, l, end);
        loop_close_iter(x, l, end);
        loop_drain_blocking(x, l, 0, INT64_MAX);
        x->w->ops->track_end(x->w, &l->thread);
    }
}

/* ---------------------------------------------- generic loop mode: windows */

static const char *const series_names[XL_SERIES] = {
    "busy_pct", "iterations_per_s", "longest_iteration_ms", "unknown_pct",
};

/* One sample of a loop thread's counters at ts. */
static void window_sample(exporter *x, xloop *l, int64_t ts, double busy_pct, double per_s,
                          double longest_ms, double unknown_pct)
{
    if (ts < x->from || ts > x->to)
        return;
    if (!l->series_declared) {
        l->series_declared = true;
        for (int k = 0; k < XL_SERIES; k++) {
            char name[64];
            snprintf(name, sizeof(name), "loop %s", series_names[k]);
            x->w->ops->track(x->w, &l->series[k], name);
        }
    }
    ls_xtrack *t[XL_SERIES] = { &l->series[0], &l->series[1], &l->series[2], &l->series[3] };
    double v[XL_SERIES] = { busy_pct, per_s, longest_ms, unknown_pct };
    x->w->ops->counters(x->w, t, "loop", series_names, v, XL_SERIES, ts);
}

/* The loop_windows rows as counters: a sample at each window's start, and
 * 0 where the windows of a thread stop (a gap, or the last one's end).
 * busy_pct and unknown_pct are shares of the window's span
 * (ls_window_shares: the rule of info and timeline), so time neither busy
 * nor waiting is unknown, never busy. */
bool x_window_counters(exporter *x)
{
    if (!ls_has_table(x->t, "loop_windows"))
        return true;
    sqlite3_stmt *st = ls_prepare(x->t, "SELECT loop_id, start_ns, end_ns, iterations, wait_ns,"
                                        " busy_ns, max_busy_ns FROM loop_windows"
                                        " ORDER BY loop_id, start_ns, end_ns");
    if (!st)
        return false;
    xloop *prev = NULL;
    int64_t prev_end = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        xloop *l = x_loop(x, sqlite3_column_int64(st, 0));
        int64_t s = ls_col_ts(st, 1), e = ls_col_ts(st, 2), it = ls_col_ts(st, 3),
                wait = ls_col_ts(st, 4), busy = ls_col_ts(st, 5), mx = ls_col_ts(st, 6);
        if (!l || e <= s || it < 0 || wait < 0 || busy < 0 || mx < 0)
            continue;                     /* no track, or malformed (info counts them) */
        if (prev && (prev != l || prev_end < s))
            window_sample(x, prev, prev_end, 0, 0, 0, 0);
        ls_shares sh = ls_window_shares((double)(e - s), (double)busy, (double)wait);
        /* a window straddling --from is sampled at --from */
        window_sample(x, l, s < x->from && e > x->from ? x->from : s, 100.0 * sh.busy,
                      (double)it * 1e9 / (double)(e - s), (double)mx / 1e6, 100.0 * sh.unknown);
        if (prev != l || e > prev_end)
            prev_end = e;
        prev = l;
    }
    if (prev)
        window_sample(x, prev, prev_end, 0, 0, 0, 0);
    bool ok = ls_step_ok(x->t, st, rc);
    sqlite3_finalize(st);
    return ok;
}
