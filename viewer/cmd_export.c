/*
 * cmd_export.c -- `loopscope export TRACE --format perfetto -o FILE`: the
 * trace in the Chrome/Perfetto Trace Event Format (JSON object form:
 * {"traceEvents":[...],"displayTimeUnit":"ns","otherData":{...}}), to open
 * in ui.perfetto.dev or chrome://tracing.  Schema of the input:
 * tracer/SCHEMA.md; the mapping is in the usage text below.
 *
 * Streaming: one SQL pass over `events` ordered by (task_id, ts_ns, rowid),
 * i.e. the events_task_ts index, so the loop-level events (task_id NULL)
 * come first in time order, then every task's events in order.  The state
 * kept is one task's current span, one span per loop, and a cursor over the
 * blocking episodes merged by task; each slice is written when it closes.
 * JSON array order carries no meaning in this format (viewers sort by ts),
 * but where two slices start at the same instant the enclosing one is
 * written first and flow ends are written after the slice they bind to,
 * which is what Perfetto's stable sort needs to nest them right.
 *
 * Timestamps are microseconds from the recording start (meta start_ns)
 * printed with three decimals, so nanosecond precision survives.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "loopstat.h"
#include "output.h"
#include "trace.h"

#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: loopscope export TRACE [--format perfetto] -o FILE [--from DUR] [--to DUR]\n"
    "\n"
    "Write the trace in the Chrome/Perfetto Trace Event Format (JSON), to open\n"
    "in https://ui.perfetto.dev or chrome://tracing.\n"
    "\n"
    "  --format F   perfetto (the only format so far; the default)\n"
    "  -o FILE      where to write the JSON; '-' for stdout\n"
    "  --from DUR   only what happens from DUR after the recording start (e.g. 4.5s)\n"
    "  --to DUR     ... up to DUR after the start; slices are clipped to the window\n"
    "\n"
    "What you see: a process per loop (\"loop N (tid T)\"), holding\n"
    "  - the loop thread's track (tid = the thread id; sorted first): slices\n"
    "    \"idle (epoll_wait)\" from poll_enter to poll_exit, \"iteration\" from\n"
    "    poll_exit to the next poll_enter (running the ready callbacks), and\n"
    "    \"callback\" for plain callbacks inside it;\n"
    "  - a track per task (tid = task id, named \"NAME (id N)\", in creation\n"
    "    order) with back-to-back slices: \"running\" (a step, task_run to the\n"
    "    next suspend or finish), \"suspended: REASON\" (sleep, io, future,\n"
    "    task, yield, executor, gather; until the wake) and \"ready\" (woken or\n"
    "    created, waiting for the loop to run it); the category is the state;\n"
    "  - blocking episodes as red slices inside the step that blocked, named\n"
    "    \"BLOCKING off-cpu read\" or \"BLOCKING on-cpu\", category \"blocking\",\n"
    "    with the call site, the syscall and the tasks it delayed in args;\n"
    "  - instants for cancel requests, failures and leak verdicts;\n"
    "  - flow arrows (category \"wake\") from the waker to the woken task's next\n"
    "    step: from the task that was running when the wake happened (a cancel,\n"
    "    a task completing a future inline), or, for a wake by task completion,\n"
    "    from the end of the awaited task's last step.\n"
    "\n"
    "A trace of the generic loop mode (a process not built on libevl: no task\n"
    "lifecycle) has a process per loop thread (\"loop thread T\") whose track\n"
    "holds every blocking episode (args: the asyncio task, when there was one)\n"
    "and the counters of its iteration windows (loop_windows): \"loop busy_pct\"\n"
    "(share of the window not in the wait call), \"loop iterations_per_s\" and\n"
    "\"loop longest_iteration_ms\", each set at a window's start and back to 0\n"
    "where windows stop.\n"
    "\n"
    "example: loopscope export trace.db -o trace.json --from 4s --to 5s\n";

struct opts {
    const char *format;
    const char *out;
    int64_t from, to;          /* offsets from start_ns; -1 = not given */
};

static int on_opt(int c, const char *arg, void *ctx)
{
    struct opts *o = ctx;
    switch (c) {
    case 'f':
        if (strcmp(arg, "perfetto") != 0)
            return ls_error("export: unknown format '%s' (supported: perfetto)", arg);
        o->format = arg;
        return 0;
    case 'o':
        o->out = arg;
        return 0;
    case 'F':
    case 'T': {
        int64_t v = ls_parse_duration(arg);
        if (v < 0)
            return ls_error("export: invalid --%s '%s' (a duration from the start, e.g. 1.5s)",
                            c == 'F' ? "from" : "to", arg);
        *(c == 'F' ? &o->from : &o->to) = v;
        return 0;
    }
    }
    return 0;
}

/* ----------------------------------------------------------- the writer */

/* Event kinds, suspend reasons and waker kinds (tracer/SCHEMA.md). */
enum { K_LOOP_START = 1, K_LOOP_STOP, K_CREATE, K_RUN, K_SUSPEND, K_WAKE, K_FINISH, K_CANCEL,
       K_LEAK, K_POLL_ENTER, K_POLL_EXIT, K_CB_BEGIN, K_CB_END };
enum { R_TASK = 4 };          /* suspend reason: awaits a task */
enum { W_TASK = 4 };          /* waker kind: the awaited task completed */

static const char *const suspend_names[] = {
    "suspended: ?", "suspended: sleep", "suspended: io", "suspended: future", "suspended: task",
    "suspended: yield", "suspended: executor", "suspended: gather",
};
static const char *const waker_names[] = {
    "?", "timer", "io", "future", "task", "cancel", "yield", "executor", "gather",
};
static const char *const state_names[] = {
    "created", "ready", "running", "suspended", "finished", "failed", "cancelled",
};
static const char *const leak_names[] = { "?", "pending_at_close", "abandoned", "unretrieved" };

#define NAME_OF(tab, i) ((i) >= 0 && (size_t)(i) < sizeof(tab) / sizeof(tab[0]) ? tab[i] : tab[0])

typedef struct writer {
    FILE *f;
    int64_t base;              /* ns that becomes ts 0 (the recording start) */
    int64_t from, to;          /* window, absolute ns (inclusive) */
    int64_t flows;             /* flow ids handed out */
    int64_t events;            /* trace events written */
    int nargs;                 /* args written in the open "args" object */
} writer;

static void put_lit(FILE *f, const char *s) { fputs_unlocked(s, f); }

/* A JSON string (task names come from the traced program): the viewer's
 * one escaper, output.c. */
static void put_str(FILE *f, const char *s) { ls_json_write_str(f, s); }

/* Integers and timestamps are formatted by hand and written with the
 * unlocked stdio calls: with printf a 10M-event export spent a third of
 * its time in vfprintf and stream locking. */
static void put_i64(FILE *f, int64_t v)
{
    char b[24], *p = b + sizeof(b);
    uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
    do
        *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *--p = '-';
    fwrite_unlocked(p, 1, (size_t)(b + sizeof(b) - p), f);
}

/* A timestamp or duration in microseconds with nanosecond digits. */
static void put_us(FILE *f, int64_t ns)
{
    uint64_t u = ns < 0 ? -(uint64_t)ns : (uint64_t)ns;   /* INT64_MIN too */
    if (ns < 0)
        putc_unlocked('-', f);
    put_i64(f, (int64_t)(u / 1000));
    int r = (int)(u % 1000);
    char b[4] = { '.', (char)('0' + r / 100), (char)('0' + r / 10 % 10), (char)('0' + r % 10) };
    fwrite_unlocked(b, 1, 4, f);
}

static void ev_start(writer *w, char ph, const char *name, const char *cat, int64_t pid,
                     int64_t tid, int64_t ts)
{
    put_lit(w->f, w->events++ ? ",\n{\"ph\":\"" : "\n{\"ph\":\"");
    putc_unlocked(ph, w->f);
    put_lit(w->f, "\",\"name\":");
    put_str(w->f, name);
    if (cat) {
        put_lit(w->f, ",\"cat\":");
        put_str(w->f, cat);
    }
    put_lit(w->f, ",\"pid\":");
    put_i64(w->f, pid);
    put_lit(w->f, ",\"tid\":");
    put_i64(w->f, tid);
    put_lit(w->f, ",\"ts\":");
    put_us(w->f, ts - w->base);
}

static void args_open(writer *w)
{
    put_lit(w->f, ",\"args\":{");
    w->nargs = 0;
}

static void args_close(writer *w) { put_lit(w->f, "}}"); }

static void arg_key(writer *w, const char *k)
{
    if (w->nargs++)
        putc_unlocked(',', w->f);
    put_str(w->f, k);
    putc_unlocked(':', w->f);
}

static void arg_int(writer *w, const char *k, int64_t v)
{
    arg_key(w, k);
    put_i64(w->f, v);
}

static void arg_str(writer *w, const char *k, const char *v)
{
    arg_key(w, k);
    put_str(w->f, v);
}

/* Milliseconds as an exact decimal number (ns precision, no trailing
 * zeros), for args a human reads. */
static void arg_ms(writer *w, const char *k, int64_t ns)
{
    char b[40];
    uint64_t u = ns < 0 ? -(uint64_t)ns : (uint64_t)ns;   /* a trace value: INT64_MIN too */
    int n = snprintf(b, sizeof(b), "%s%" PRIu64 ".%06d", ns < 0 ? "-" : "", u / 1000000,
                     (int)(u % 1000000));
    while (n > 0 && b[n - 1] == '0')
        b[--n] = 0;
    if (n > 0 && b[n - 1] == '.')
        b[--n] = 0;
    arg_key(w, k);
    fputs(b, w->f);
}

/* An errno-style error code, with its name when it is an errno. */
static void arg_error(writer *w, int64_t err)
{
    arg_int(w, "error", err);
    const char *name = err < 0 && err > -4096 ? strerrorname_np((int)-err) : NULL;
    if (name)
        arg_str(w, "error_name", name);
}

static void arg_hex(writer *w, const char *k, int64_t v)
{
    char b[32];
    snprintf(b, sizeof(b), "0x%" PRIx64, (uint64_t)v);
    arg_str(w, k, b);
}

/* Does [a, b] show in the window? (an instant when a == b) */
static bool in_window(const writer *w, int64_t a, int64_t b)
{
    return b <= a ? a >= w->from && a <= w->to : a < w->to && b > w->from;
}

/* Open an "X" slice [a, b] clipped to the window, leaving its args object
 * open (args_close ends the event).  False when it lies outside. */
static bool slice_open(writer *w, int64_t pid, int64_t tid, int64_t a, int64_t b,
                       const char *name, const char *cat, const char *cname)
{
    if (b < a)
        b = a;
    if (!in_window(w, a, b))
        return false;
    if (a < w->from)
        a = w->from;
    if (b > w->to)
        b = w->to;
    ev_start(w, 'X', name, cat, pid, tid, a);
    put_lit(w->f, ",\"dur\":");
    put_us(w->f, b - a);
    if (cname) {
        put_lit(w->f, ",\"cname\":\"");
        put_lit(w->f, cname);
        putc_unlocked('"', w->f);
    }
    args_open(w);
    return true;
}

/* An instant on a thread track; args left open as for slice_open. */
static bool instant_open(writer *w, int64_t pid, int64_t tid, int64_t ts, const char *name,
                         const char *cat, const char *cname)
{
    if (ts < w->from || ts > w->to)
        return false;
    ev_start(w, 'i', name, cat, pid, tid, ts);
    fputs(",\"s\":\"t\"", w->f);
    if (cname)
        fprintf(w->f, ",\"cname\":\"%s\"", cname);
    args_open(w);
    return true;
}

static void meta_event(writer *w, const char *name, int64_t pid, int64_t tid, const char *key,
                       const char *sval, int64_t ival)
{
    fputs(w->events++ ? ",\n" : "\n", w->f);
    fprintf(w->f, "{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%" PRId64 ",\"tid\":%" PRId64
            ",\"ts\":0,\"args\":{\"%s\":", name, pid, tid, key);
    if (sval)
        put_str(w->f, sval);
    else
        fprintf(w->f, "%" PRId64, ival);
    fputs("}}", w->f);
}

/* A wake arrow: "s" on the waker's track, "f" (bound to the enclosing
 * slice) at the start of the woken task's step.  Same id, cat and name. */
static void flow(writer *w, int64_t spid, int64_t stid, int64_t sts, int64_t fpid, int64_t ftid,
                 int64_t fts, const char *via)
{
    if (sts < w->from || fts > w->to || sts > fts)
        return;
    int64_t id = ++w->flows;
    ev_start(w, 's', "wake", "wake", spid, stid, sts);
    fprintf(w->f, ",\"id\":%" PRId64, id);
    args_open(w);
    arg_str(w, "via", via);
    args_close(w);
    ev_start(w, 'f', "wake", "wake", fpid, ftid, fts);
    fprintf(w->f, ",\"id\":%" PRId64 ",\"bp\":\"e\"", id);
    args_open(w);
    arg_str(w, "via", via);
    args_close(w);
}

/* ------------------------------------------------------------- the loops */

typedef struct loop_track {
    int64_t id, os_tid, track_tid, started, stopped;
    int64_t poll_ts;           /* poll_enter of the open idle span, -1 none */
    int64_t poll_timeout;
    int64_t iter_ts;           /* poll_exit opening the current iteration, -1 none */
    int64_t iter_fds, iter_n;
    int64_t cb_ts, cb_addr;    /* open plain callback, -1 none */
    size_t blk_next;           /* next callback episode of this loop (cb_blocking) */
} loop_track;

/* A blocking episode (from the blocking table, with its site). */
typedef struct episode {
    int64_t id, task_id, loop_id, start, dur, kind, delayed;
    char *syscall, *site, *victims, *task;
} episode;

typedef struct exporter {
    ls_trace *t;
    writer w;
    int64_t end;               /* recording end (ns) */
    loop_track *loops;
    size_t nloops;
    bool generic;              /* generic loop mode: no lifecycle, loop threads */
    episode *cb_blocking;      /* episodes outside any task (generic: all), by start */
    size_t ncb;
    sqlite3_stmt *blk;         /* task episodes by (task_id, start_ns) */
    int blk_rc;                /* last sqlite3_step of blk */
} exporter;

static loop_track *find_loop(exporter *x, int64_t id)
{
    for (size_t i = 0; i < x->nloops; i++)
        if (x->loops[i].id == id)
            return &x->loops[i];
    return NULL;
}

static int64_t loop_end(exporter *x, int64_t loop_id)
{
    loop_track *l = find_loop(x, loop_id);
    return l && l->stopped > 0 ? l->stopped : x->end;
}

static void episode_free(episode *e)
{
    free(e->syscall);
    free(e->site);
    free(e->victims);
    free(e->task);
}

static char *col_dup(sqlite3_stmt *st, int i)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? strdup((const char *)s) : NULL;
}

static void episode_read(sqlite3_stmt *st, episode *e)
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
}

static const char episodes_sql[] =
    "SELECT b.id, b.task_id, b.loop_id, b.start_ns, b.dur_ns, b.kind, y.name,"
    "  s.file, s.line, s.function, b.delayed_tasks,"
    "  (SELECT group_concat(n, ', ') FROM (SELECT coalesce(t.name, '?') || ' (id ' || v.task_id"
    "     || ')' AS n FROM blocking_victims v LEFT JOIN tasks t ON t.id = v.task_id"
    "     WHERE v.blocking_id = b.id ORDER BY v.delay_ns DESC, v.task_id)),"
    "  (SELECT name FROM tasks WHERE id = b.task_id)"
    " FROM blocking b LEFT JOIN syscalls y ON y.nr = b.syscall"
    " LEFT JOIN sites s ON s.stack_id = b.stack_id"
    " WHERE %s ORDER BY %sb.start_ns, b.id";

/* Write one episode as a slice clipped to [lo, hi] (the step or callback
 * it happened in) and to after *prev_end (episodes of one step may
 * overlap: the on-CPU part starts at the step start), so slices nest. */
static void episode_write(exporter *x, const episode *e, int64_t pid, int64_t tid, int64_t lo,
                          int64_t hi, int64_t *prev_end)
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
    char name[96];
    snprintf(name, sizeof(name), "BLOCKING %s%s%s", e->kind == 2 ? "on-cpu" : "off-cpu",
             e->syscall ? " " : "", e->syscall ? e->syscall : "");
    if (!slice_open(&x->w, pid, tid, a, b, name, "blocking", "terrible"))
        return;
    writer *w = &x->w;
    arg_int(w, "episode", e->id);
    arg_str(w, "kind", e->kind == 2 ? "on-cpu" : "off-cpu");
    if (e->syscall)
        arg_str(w, "syscall", e->syscall);
    arg_str(w, "site", e->site ? e->site : "(no application frame)");
    arg_ms(w, "held_ms", e->dur);
    if (x->generic && e->task)
        arg_str(w, "asyncio_task", e->task);
    if (!x->generic)
        arg_int(w, "delayed_tasks", e->delayed);
    if (e->victims)
        arg_str(w, "delayed", e->victims);
    args_close(w);
}

/* Load the loops and the episodes outside tasks; prepare the task cursor. */
static bool load_static(exporter *x)
{
    sqlite3_stmt *st = ls_prepare(x->t,
        "SELECT id, tid, coalesce(started_ns, 0), coalesce(stopped_ns, 0),"
        "  EXISTS (SELECT 1 FROM tasks WHERE tasks.id = loops.tid) FROM loops ORDER BY id");
    if (!st)
        return false;
    int rc;
    bool clash = false;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        loop_track *l = realloc(x->loops, (x->nloops + 1) * sizeof(*l));
        if (!l)
            break;
        x->loops = l;
        l += x->nloops++;
        *l = (loop_track){ .id = sqlite3_column_int64(st, 0), .os_tid = sqlite3_column_int64(st, 1),
                           .started = ls_col_ts(st, 2),
                           .stopped = ls_col_ts(st, 3), .poll_ts = -1, .iter_ts = -1,
                           .cb_ts = -1 };
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
    for (size_t i = 0; i < x->nloops; i++)     /* ids are anything: wrap, not overflow */
        x->loops[i].track_tid = off ? (int64_t)((uint64_t)off + (uint64_t)x->loops[i].id)
                                    : x->loops[i].os_tid;
    if (!ok)
        return false;

    /* Generic mode: every episode on its loop thread's track, by start. */
    char sql[sizeof(episodes_sql) + 64];
    snprintf(sql, sizeof(sql), episodes_sql, x->generic ? "1" : "b.task_id IS NULL",
             x->generic ? "" : "b.task_id, ");
    if (!(st = ls_prepare(x->t, sql)))
        return false;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        episode *e = realloc(x->cb_blocking, (x->ncb + 1) * sizeof(*e));
        if (!e)
            break;
        x->cb_blocking = e;
        episode_read(st, &x->cb_blocking[x->ncb++]);
    }
    ok = ls_step_ok(x->t, st, rc);
    sqlite3_finalize(st);
    if (!ok)
        return false;
    snprintf(sql, sizeof(sql), episodes_sql, x->generic ? "0" : "b.task_id IS NOT NULL",
             "b.task_id, ");
    if (!(x->blk = ls_prepare(x->t, sql)))
        return false;
    x->blk_rc = sqlite3_step(x->blk);
    return ls_step_ok(x->t, x->blk, x->blk_rc);
}

static void loop_metadata(exporter *x)
{
    char name[96];
    for (size_t i = 0; i < x->nloops; i++) {
        loop_track *l = &x->loops[i];
        if (x->generic)
            snprintf(name, sizeof(name), "loop thread %" PRId64, l->os_tid);
        else
            snprintf(name, sizeof(name), "loop %" PRId64 " (tid %" PRId64 ")", l->id, l->os_tid);
        meta_event(&x->w, "process_name", l->id, l->track_tid, "name", name, 0);
        meta_event(&x->w, "process_sort_index", l->id, l->track_tid, "sort_index", NULL, l->id);
        snprintf(name, sizeof(name), "event loop (tid %" PRId64 ")", l->os_tid);
        meta_event(&x->w, "thread_name", l->id, l->track_tid, "name", name, 0);
        meta_event(&x->w, "thread_sort_index", l->id, l->track_tid, "sort_index", NULL, -1);
    }
}

/* Episodes outside tasks that start before `hi`, inside the callback. */
static void loop_drain_blocking(exporter *x, loop_track *l, int64_t lo, int64_t hi)
{
    int64_t prev = lo;
    for (; l->blk_next < x->ncb; l->blk_next++) {
        episode *e = &x->cb_blocking[l->blk_next];
        if (e->loop_id != l->id)
            continue;
        if (e->start >= hi)
            break;
        episode_write(x, e, l->id, l->track_tid, lo, hi, &prev);
    }
}

static void loop_close_idle(exporter *x, loop_track *l, int64_t ts)
{
    if (l->poll_ts < 0)
        return;
    writer *w = &x->w;
    if (slice_open(w, l->id, l->track_tid, l->poll_ts, ts, "idle (epoll_wait)", "idle", "grey")) {
        if (l->poll_timeout < 0)
            arg_str(w, "timeout", "infinite");
        else
            arg_ms(w, "timeout_ms", l->poll_timeout);
        args_close(w);
    }
    l->poll_ts = -1;
}

static void loop_close_iter(exporter *x, loop_track *l, int64_t ts)
{
    if (l->cb_ts >= 0) {                    /* a callback cut short (loop stop) */
        writer *w = &x->w;
        if (slice_open(w, l->id, l->track_tid, l->cb_ts, ts, "callback", "callback", NULL)) {
            arg_hex(w, "function", l->cb_addr);
            args_close(w);
        }
        l->cb_ts = -1;
    }
    if (l->iter_ts < 0)
        return;
    writer *w = &x->w;
    if (slice_open(w, l->id, l->track_tid, l->iter_ts, ts, "iteration", "iteration", NULL)) {
        arg_int(w, "iteration", l->iter_n);
        arg_int(w, "ready_fds", l->iter_fds);
        args_close(w);
    }
    l->iter_ts = -1;
}

/* One loop-level event (task_id NULL). */
static void loop_event(exporter *x, int64_t loop_id, int64_t ts, int kind, int64_t reason,
                       int64_t arg0)
{
    loop_track *l = find_loop(x, loop_id);
    writer *w = &x->w;
    if (!l)
        return;
    switch (kind) {
    case K_LOOP_START:
    case K_LOOP_STOP:
        if (kind == K_LOOP_STOP) {
            loop_close_idle(x, l, ts);
            loop_close_iter(x, l, ts);
        }
        if (instant_open(w, l->id, l->track_tid, ts, kind == K_LOOP_START ? "loop_start" : "loop_stop",
                         "loop", NULL)) {
            arg_int(w, "tid", reason);
            args_close(w);
        }
        break;
    case K_POLL_ENTER:
        loop_close_iter(x, l, ts);
        l->poll_ts = ts;
        l->poll_timeout = arg0;
        break;
    case K_POLL_EXIT:
        loop_close_idle(x, l, ts);
        l->iter_ts = ts;
        l->iter_fds = reason;
        l->iter_n++;
        break;
    case K_CB_BEGIN:
        l->cb_ts = ts;
        l->cb_addr = arg0;
        break;
    case K_CB_END:
        if (l->cb_ts >= 0) {
            if (slice_open(w, l->id, l->track_tid, l->cb_ts, ts, "callback", "callback", NULL)) {
                arg_hex(w, "function", l->cb_addr);
                args_close(w);
            }
            loop_drain_blocking(x, l, l->cb_ts, ts);
        }
        l->cb_ts = -1;
        break;
    }
}

static void loops_finish(exporter *x)
{
    for (size_t i = 0; i < x->nloops; i++) {
        loop_track *l = &x->loops[i];
        int64_t end = l->stopped > 0 ? l->stopped : x->end;
        loop_close_idle(x, l, end);
        loop_close_iter(x, l, end);
        loop_drain_blocking(x, l, 0, INT64_MAX);
    }
}

/* ---------------------------------------------- generic loop mode: windows */

/* A finite number (a trace value divided by another) as a JSON number. */
static void arg_num(writer *w, const char *k, double v)
{
    char b[40];
    snprintf(b, sizeof(b), "%.6g", isfinite(v) ? v : 0.0);
    arg_key(w, k);
    fputs(b, w->f);
}

/* One sample of a loop thread's counters at ts. */
static void window_sample(exporter *x, const loop_track *l, int64_t ts, double busy_pct,
                          double per_s, double longest_ms)
{
    writer *w = &x->w;
    if (ts < w->from || ts > w->to)
        return;
    ev_start(w, 'C', "loop", NULL, l->id, l->track_tid, ts);
    args_open(w);
    arg_num(w, "busy_pct", busy_pct);
    arg_num(w, "iterations_per_s", per_s);
    arg_num(w, "longest_iteration_ms", longest_ms);
    args_close(w);
}

/* The loop_windows rows as counters: a sample at each window's start, and
 * 0 where the windows of a thread stop (a gap, or the last one's end). */
static bool window_counters(exporter *x)
{
    if (!ls_has_table(x->t, "loop_windows"))
        return true;
    sqlite3_stmt *st = ls_prepare(x->t, "SELECT loop_id, start_ns, end_ns, iterations, wait_ns,"
                                        " busy_ns, max_busy_ns FROM loop_windows"
                                        " ORDER BY loop_id, start_ns, end_ns");
    if (!st)
        return false;
    const loop_track *prev = NULL;
    int64_t prev_end = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const loop_track *l = find_loop(x, sqlite3_column_int64(st, 0));
        int64_t s = ls_col_ts(st, 1), e = ls_col_ts(st, 2), it = ls_col_ts(st, 3),
                wait = ls_col_ts(st, 4), busy = ls_col_ts(st, 5), mx = ls_col_ts(st, 6);
        if (!l || e <= s || it < 0 || wait < 0 || busy < 0 || mx < 0)
            continue;                     /* no track, or malformed (info counts them) */
        if (prev && (prev != l || prev_end < s))
            window_sample(x, prev, prev_end, 0, 0, 0);
        double in = (double)busy + (double)wait;
        /* a window straddling --from is sampled at --from */
        window_sample(x, l, s < x->w.from && e > x->w.from ? x->w.from : s,
                      in > 0 ? 100.0 * (double)busy / in : 0,
                      (double)it * 1e9 / (double)(e - s), (double)mx / 1e6);
        if (prev != l || e > prev_end)
            prev_end = e;
        prev = l;
    }
    if (prev)
        window_sample(x, prev, prev_end, 0, 0, 0);
    bool ok = ls_step_ok(x->t, st, rc);
    sqlite3_finalize(st);
    return ok;
}

/* ------------------------------------------------------------- the tasks */


enum tstate { T_UNKNOWN, T_READY, T_RUNNING, T_SUSPENDED, T_DONE };

typedef struct task_track {
    int64_t id, loop, sort;
    char *name;
    bool meta_done;            /* thread_name written */
    enum tstate state;
    int64_t since;             /* start of the current span */
    int64_t step;              /* steps so far */
    int64_t reason, obj, timeout;   /* of the last suspend */
    int64_t awaited_end, awaited_loop; /* suspended on a task: when it ended, its loop */
    int64_t wake_kind, waker;  /* how it became ready (-1 created) */
    /* pending wake arrow, ended at the next step */
    bool flow;
    int64_t flow_pid, flow_tid, flow_ts;
    const char *flow_via;
    int64_t blk_prev;          /* end of the last episode written */
} task_track;

/* The track's metadata, written before the first thing shown on it, so
 * tasks wholly outside the --from/--to window get no empty track. */
static void task_meta(exporter *x, task_track *tk, int64_t a, int64_t b)
{
    if (tk->meta_done || !in_window(&x->w, a, b))
        return;
    tk->meta_done = true;
    char *label = NULL;
    if (asprintf(&label, "%s (id %" PRId64 ")", tk->name ? tk->name : "?", tk->id) < 0)
        label = NULL;
    meta_event(&x->w, "thread_name", tk->loop, tk->id, "name", label ? label : "?", 0);
    meta_event(&x->w, "thread_sort_index", tk->loop, tk->id, "sort_index", NULL, tk->sort);
    free(label);
}

/* Episodes of this task that start before `hi`, clipped to the step. */
static void task_drain_blocking(exporter *x, task_track *tk, int64_t lo, int64_t hi)
{
    while (x->blk_rc == SQLITE_ROW) {
        int64_t tid = sqlite3_column_int64(x->blk, 1);
        if (tid > tk->id || (tid == tk->id && sqlite3_column_int64(x->blk, 3) >= hi))
            return;
        episode e;
        episode_read(x->blk, &e);
        if (tid == tk->id) {
            task_meta(x, tk, e.start, e.start + e.dur);
            if (tk->blk_prev < lo)
                tk->blk_prev = lo;
            episode_write(x, &e, tk->loop, tk->id, lo, hi, &tk->blk_prev);
        } else {                            /* a task without events: own track */
            int64_t prev = 0;
            episode_write(x, &e, e.loop_id, e.task_id, 0, INT64_MAX, &prev);
        }
        episode_free(&e);
        x->blk_rc = sqlite3_step(x->blk);
    }
}

/* Close the current span of tk at ts (the event that ends it). */
static void task_close_span(exporter *x, task_track *tk, int64_t ts, const char *ends, int64_t err)
{
    writer *w = &x->w;
    bool open = false;
    if (tk->state != T_UNKNOWN && tk->state != T_DONE)
        task_meta(x, tk, tk->since, ts);
    switch (tk->state) {
    case T_RUNNING:
        open = slice_open(w, tk->loop, tk->id, tk->since, ts, "running", "running",
                          "thread_state_running");
        if (open) {
            arg_int(w, "step", tk->step);
            if (ends)
                arg_str(w, "ends", ends);
        }
        break;
    case T_READY:
        open = slice_open(w, tk->loop, tk->id, tk->since, ts, "ready", "ready",
                          "thread_state_runnable");
        if (open) {
            if (tk->wake_kind < 0)
                arg_str(w, "since", "created");
            else
                arg_str(w, "woken_by", NAME_OF(waker_names, tk->wake_kind));
            if (tk->waker > 0)
                arg_int(w, "waker_task", tk->waker);
            if (ends)
                arg_str(w, "ends", ends);
        }
        break;
    case T_SUSPENDED:
        open = slice_open(w, tk->loop, tk->id, tk->since, ts, NAME_OF(suspend_names, tk->reason),
                          "suspended", tk->reason == 2 ? "thread_state_iowait"
                                                       : "thread_state_sleeping");
        if (open) {
            switch (tk->reason) {
            case 1: arg_ms(w, "sleep_ms", tk->timeout); break;
            case 2: arg_int(w, "fd", tk->obj); break;
            case R_TASK: arg_int(w, "awaits_task", tk->obj); break;
            case 5: break;
            default: arg_hex(w, "future", tk->obj); break;
            }
            if (ends)
                arg_str(w, "ends", ends);
        }
        break;
    case T_UNKNOWN:
    case T_DONE:
        break;
    }
    if (open) {
        if (ends && err)
            arg_error(w, err);
        args_close(w);
    }
    if (tk->state == T_RUNNING) {
        task_drain_blocking(x, tk, tk->since, ts);
        if (tk->flow) {                    /* after the slice it binds to */
            flow(w, tk->flow_pid, tk->flow_tid, tk->flow_ts, tk->loop, tk->id, tk->since,
                 tk->flow_via);
            tk->flow = false;
        }
    }
}

static void task_event(exporter *x, task_track *tk, int64_t ts, int kind, int64_t reason,
                       int64_t arg0, int64_t arg1, int64_t other_loop, int64_t other_end)
{
    writer *w = &x->w;
    switch (kind) {
    case K_CREATE:
        tk->state = reason == 1 ? T_UNKNOWN : T_READY;   /* pre-existing: state unknown */
        tk->since = ts;
        tk->wake_kind = -1;
        tk->waker = 0;
        break;
    case K_RUN:
        if (tk->state == T_UNKNOWN) {       /* pre-existing and ready: show it so */
            tk->state = T_READY;
            tk->wake_kind = -1;
        }
        if (tk->state != T_RUNNING)
            task_close_span(x, tk, ts, NULL, 0);
        tk->state = T_RUNNING;
        tk->since = ts;
        tk->step++;
        break;
    case K_SUSPEND:
        task_close_span(x, tk, ts, NULL, 0);
        tk->state = T_SUSPENDED;
        tk->since = ts;
        tk->reason = reason;
        tk->obj = arg0;
        tk->timeout = arg1;
        tk->awaited_end = reason == R_TASK ? other_end : -1;
        tk->awaited_loop = other_loop;
        break;
    case K_WAKE:
        if (tk->state == T_UNKNOWN) {       /* pre-existing: it was suspended */
            tk->state = T_SUSPENDED;
            tk->reason = 0;
            tk->awaited_end = -1;
        }
        if (tk->state != T_SUSPENDED && tk->state != T_READY)
            break;                          /* woken while running: nothing to show */
        if (tk->state == T_SUSPENDED) {
            task_close_span(x, tk, ts, NULL, 0);
            tk->since = ts;
        }
        tk->state = T_READY;
        tk->wake_kind = reason;
        tk->waker = arg0;
        tk->flow = false;
        if (arg0 > 0 && arg0 != tk->id && other_loop > 0) {
            tk->flow = true;
            tk->flow_pid = other_loop;
            tk->flow_tid = arg0;
            tk->flow_ts = ts;
            tk->flow_via = NAME_OF(waker_names, reason);
        } else if (reason == W_TASK && tk->reason == R_TASK && tk->awaited_end > 0 &&
                   tk->awaited_end <= ts && tk->awaited_loop > 0) {
            /* From the end of the awaited task's last slice (1 ns before
             * its finish, so the arrow binds inside it). */
            tk->flow = true;
            tk->flow_pid = tk->awaited_loop;
            tk->flow_tid = tk->obj;
            tk->flow_ts = tk->awaited_end - 1;
            tk->flow_via = "task completion";
        }
        break;
    case K_FINISH: {
        const char *st = NAME_OF(state_names, reason);
        if (tk->state != T_DONE)
            task_close_span(x, tk, ts, st, arg0);
        tk->state = T_DONE;
        if (reason != 4) {
            task_meta(x, tk, ts, ts);
            char name[64];
            snprintf(name, sizeof(name), "%s", st);
            if (instant_open(w, tk->loop, tk->id, ts, name, "finish",
                             reason == 5 ? "bad" : NULL)) {
                arg_error(w, arg0);
                args_close(w);
            }
        }
        break;
    }
    case K_CANCEL:
        task_meta(x, tk, ts, ts);
        if (instant_open(w, tk->loop, tk->id, ts, "cancel requested", "cancel", NULL)) {
            if (arg0 > 0)
                arg_int(w, "by_task", arg0);
            args_close(w);
        }
        break;
    case K_LEAK: {
        char name[64];
        snprintf(name, sizeof(name), "LEAK: %s", NAME_OF(leak_names, reason));
        task_meta(x, tk, ts, ts);
        if (instant_open(w, tk->loop, tk->id, ts, name, "leak", "terrible")) {
            arg_str(w, "verdict", NAME_OF(leak_names, reason));
            args_close(w);
        }
        break;
    }
    }
}

/* The task's events are over: close what is open at its loop's stop. */
static void task_finish_stream(exporter *x, task_track *tk)
{
    if (tk->state != T_DONE && tk->state != T_UNKNOWN) {
        int64_t end = loop_end(x, tk->loop);
        loop_track *l = find_loop(x, tk->loop);
        task_close_span(x, tk, end > tk->since ? end : tk->since,
                        l && l->stopped > 0 ? "loop stopped" : "end of recording", 0);
    }
    task_drain_blocking(x, tk, 0, INT64_MAX);
    free(tk->name);
    tk->name = NULL;
}

/* ----------------------------------------------------------- the command */

static const char events_sql[] =
    "SELECT e.task_id, e.ts_ns, e.kind, e.reason, e.arg0, e.arg1, e.loop_id, o.loop_id, o.ended_ns"
    " FROM events e LEFT JOIN tasks o ON o.id = CASE WHEN e.kind = 6 AND e.arg0 > 0 THEN e.arg0"
    "   WHEN e.kind = 5 AND e.reason = 4 THEN e.arg0 END"
    " ORDER BY e.task_id, e.ts_ns, e.rowid";

static const char tasks_sql[] =
    "SELECT id, loop_id, name, row_number() OVER (ORDER BY created_ns, id) FROM tasks ORDER BY id";

static bool export_all(exporter *x)
{
    writer *w = &x->w;
    sqlite3_stmt *ev = ls_prepare(x->t, events_sql);
    sqlite3_stmt *tq = ev ? ls_prepare(x->t, tasks_sql) : NULL;
    if (!tq) {
        sqlite3_finalize(ev);
        return false;
    }
    int trc = sqlite3_step(tq);
    task_track tk = { .id = -1 };
    bool have_task = false;
    int rc;
    while ((rc = sqlite3_step(ev)) == SQLITE_ROW) {
        int64_t ts = ls_col_ts(ev, 1), reason = sqlite3_column_int64(ev, 3);
        int64_t arg0 = sqlite3_column_int64(ev, 4), arg1 = sqlite3_column_int64(ev, 5);
        int kind = sqlite3_column_int(ev, 2);
        if (sqlite3_column_type(ev, 0) == SQLITE_NULL) {
            loop_event(x, sqlite3_column_int64(ev, 6), ts, kind, reason, arg0);
            continue;
        }
        int64_t id = sqlite3_column_int64(ev, 0);
        if (!have_task || id != tk.id) {
            if (have_task)
                task_finish_stream(x, &tk);
            else
                loops_finish(x);           /* loop-level events come first */
            have_task = true;
            tk = (task_track){ .id = id, .loop = sqlite3_column_int64(ev, 6), .sort = id,
                               .state = T_UNKNOWN, .since = ts, .wake_kind = -1 };
            while (trc == SQLITE_ROW && sqlite3_column_int64(tq, 0) < id)
                trc = sqlite3_step(tq);
            if (trc == SQLITE_ROW && sqlite3_column_int64(tq, 0) == id) {
                tk.loop = sqlite3_column_int64(tq, 1);
                tk.name = col_dup(tq, 2);
                tk.sort = sqlite3_column_int64(tq, 3);
            }
            task_drain_blocking(x, &tk, 0, INT64_MIN + 1);   /* orphans before it */
        }
        task_event(x, &tk, ts, kind, reason, arg0, arg1,
                   sqlite3_column_type(ev, 7) == SQLITE_NULL ? 0 : sqlite3_column_int64(ev, 7),
                   sqlite3_column_type(ev, 8) == SQLITE_NULL ? -1 : ls_col_ts(ev, 8));
        if (ferror(w->f))
            break;
    }
    bool ok = ls_step_ok(x->t, ev, rc) && (trc == SQLITE_ROW || ls_step_ok(x->t, tq, trc));
    if (have_task)
        task_finish_stream(x, &tk);
    else
        loops_finish(x);
    task_track none = { .id = INT64_MAX };
    task_drain_blocking(x, &none, 0, INT64_MIN + 1);
    sqlite3_finalize(ev);
    sqlite3_finalize(tq);
    return ok;
}

static void other_data(exporter *x)
{
    static const char *const keys[] = {
        "tool", "target_cmdline", "target_pid", "host", "kernel", "start_utc", "mode",
        "block_threshold_ns", "dropped_messages", "dropped_bytes", "rejected_records",
        "read_errors", "dropped_events_claimed", "dropped_events",
    };
    FILE *f = x->w.f;
    fputs("\"otherData\":{", f);
    int n = 0;
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        char *v = ls_meta(x->t, keys[i]);
        if (!v)
            continue;
        fprintf(f, "%s\"%s\":", n++ ? "," : "", keys[i]);
        put_str(f, v);
        free(v);
    }
    fputs("}", f);
}

int cmd_export(int argc, char **argv)
{
    struct opts o = { .format = "perfetto", .from = -1, .to = -1 };
    static const struct option longopts[] = {
        { "format", required_argument, NULL, 'f' },
        { "output", required_argument, NULL, 'o' },
        { "from", required_argument, NULL, 'F' },
        { "to", required_argument, NULL, 'T' },
        { 0 },
    };
    ls_optspec spec = { longopts, "o:f:", on_opt, &o };
    const char *path;
    int rc = ls_parse_common(argc, argv, usage, &path, NULL, &spec, NULL);
    if (rc)
        return rc;
    if (!o.out) {
        fprintf(stderr, "error: export: no output file (-o FILE, or -o - for stdout)\n"
                        "see 'loopscope export --help'\n");
        return 2;
    }
    if (o.from >= 0 && o.to >= 0 && o.to <= o.from) {
        fprintf(stderr, "error: export: --to must be after --from\n");
        return 2;
    }
    ls_trace *t = ls_trace_open(path);
    if (!t)
        return 1;
    /* Large reads in index order jump around the table: let SQLite map it. */
    sqlite3_exec(t->db, "PRAGMA mmap_size = 4294967296; PRAGMA cache_size = -262144", NULL, NULL,
                 NULL);
    if (!ls_create_app_frames(t)) {
        ls_trace_close(t);
        return 1;
    }
    exporter x = { .t = t, .generic = ls_is_generic(t) };
    int64_t start = ls_meta_ts(t, "start_ns", -1);
    x.end = ls_meta_ts(t, "end_ns", -1);
    sqlite3_stmt *st = ls_prepare(t, "SELECT min(ts_ns), max(ts_ns) FROM events");
    if (!st) {
        ls_trace_close(t);
        return 1;
    }
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
        int64_t lo = ls_col_ts(st, 0), hi = ls_col_ts(st, 1);
        if (start < 0 || lo < start)
            start = lo;           /* ts must not go negative */
        if (x.end < hi)
            x.end = hi;
    }
    sqlite3_finalize(st);
    if (start < 0)
        start = 0;
    if (x.end < start)
        x.end = start;
    x.w.base = start;
    x.w.from = o.from >= 0 ? start + ls_ts(o.from) : INT64_MIN;
    x.w.to = o.to >= 0 ? start + ls_ts(o.to) : INT64_MAX;

    bool to_stdout = !strcmp(o.out, "-");
    FILE *f = to_stdout ? stdout : fopen(o.out, "w");
    if (!f) {
        ls_error("export: cannot write '%s': %s", o.out, strerror(errno));
        ls_trace_close(t);
        return 1;
    }
    static char buf[1 << 20];
    if (!to_stdout)
        setvbuf(f, buf, _IOFBF, sizeof(buf));
    x.w.f = f;
    fputs("{\"displayTimeUnit\":\"ns\",", f);
    other_data(&x);
    fputs(",\"traceEvents\":[", f);
    bool ok = load_static(&x);
    if (ok) {
        loop_metadata(&x);
        ok = export_all(&x) && window_counters(&x);
    }
    fputs("\n]}\n", f);
    sqlite3_finalize(x.blk);
    for (size_t i = 0; i < x.ncb; i++)
        episode_free(&x.cb_blocking[i]);
    free(x.cb_blocking);
    free(x.loops);
    ls_trace_close(t);
    if (to_stdout)
        return ok ? 0 : 1;
    if (fflush(f) != 0 || ferror(f)) {
        ok = false;
        ls_error("export: cannot write '%s': %s", o.out, strerror(errno));
    }
    if (fclose(f) != 0 && ok) {
        ok = false;
        ls_error("export: cannot write '%s': %s", o.out, strerror(errno));
    }
    if (!ok)
        unlink(o.out);
    return ok ? 0 : 1;
}
