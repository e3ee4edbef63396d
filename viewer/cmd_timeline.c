/*
 * cmd_timeline.c -- `loopscope timeline TRACE`: swimlanes, one row per
 * task, showing when it was running, ready (woken, waiting for the loop),
 * suspended or blocking the loop, fitted to the terminal width; or, with
 * --svg, the same timeline as a picture whose spans carry hover titles.
 * The design overview is /work/shared/DESIGN.md ("Viewer"); the tables read
 * here are described in tracer/SCHEMA.md.
 *
 * Spans come from the task's lifecycle events (kinds 3-7): create and wake
 * start "ready", run starts "running", suspend starts "suspended" and
 * finish ends the task; the last state lasts until the loop stopped or the
 * recording ended.  Blocking episodes (table `blocking`) are drawn over the
 * task they happened in and on a row of their loop.
 *
 * Cost is bounded whatever the trace size: only --limit tasks are drawn
 * (the ones with most events in the window, counted on the
 * events_task_ts(task_id, ts_ns) index without reading the rows), and a
 * task's events are read only while they are few (EXACT_BUDGET); past that
 * the row is resolved column by column, reading at most CELL_BUDGET events
 * per column plus one index seek for the state at the column's end.  So
 * the work is about tasks x columns, never the number of events.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "loopstat.h"
#include "output.h"
#include "trace.h"

#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static const char usage[] =
    "usage: loopscope timeline TRACE [--from DUR] [--to DUR] [--tasks GLOB] [--loop N]\n"
    "                         [--limit N] [--svg FILE] [--no-color] [--ascii]\n"
    "\n"
    "Swimlanes, one row per task (\"name#id\"), fitted to the terminal width\n"
    "(COLUMNS, else the terminal's width, else 100): when the task was running,\n"
    "ready (woken or created, waiting for the loop), suspended, or blocking the\n"
    "loop.  A column shows the highest-ranked state the task was in during its\n"
    "time slice: blocking > running (for at least half of the slice) > ran\n"
    "briefly > ready > suspended; blank: not alive.  A row per loop shows its\n"
    "blocking episodes.  Times are relative to the start of the recording.\n"
    "\n"
    "  --from DUR     start of the window (e.g. 1.5s; default: the first event)\n"
    "  --to DUR       end of the window (default: the last event)\n"
    "  --tasks GLOB   only tasks whose name, or name#id, matches (e.g. 'worker-*')\n"
    "  --loop N       only tasks of loop N\n"
    "  --limit N      at most N tasks (default 40): the busiest in the window,\n"
    "                 i.e. with most steps and wakes in it (estimated from the\n"
    "                 task's totals and how much of its life is in the window)\n"
    "  --svg FILE     write an SVG picture instead (hover a span for its task,\n"
    "                 state, reason, start and duration)\n"
    "  --no-color     no colours (also when NO_COLOR is set or not on a terminal)\n"
    "  --ascii        ASCII glyphs even on a UTF-8 terminal\n"
    "\n"
    "A trace of the generic loop mode (a process not built on libevl: no task\n"
    "lifecycle) gets one row per loop thread (\"thread TID\"; --loop TID picks one,\n"
    "--limit caps the rows, --tasks does not apply) from its iteration windows\n"
    "(loop_windows): per column blocked (a blocking episode) > busy for at least\n"
    "half of the time (not in the wait call) > partly busy (10% or more) >\n"
    "waiting; blank: no window.  A window's busy and wait times are spread evenly\n"
    "over it, so columns finer than the windows are approximate.\n"
    "\n"
    "example: loopscope timeline trace.db --from 1.5s --to 1.7s --tasks 'handle_conn*'\n";

/* Task states, in increasing display priority. */
enum { ST_NONE, ST_SUSP, ST_READY, ST_RUN, ST_BLOCK, ST_COUNT };

static const char *const state_names[ST_COUNT] = { "not alive", "suspended", "ready", "running",
                                                   "blocking" };
static const char *const svg_color[ST_COUNT] = { "none", "#9aa7b8", "#e8a915", "#2e9e44",
                                                 "#d62728" };

/* What a terminal column shows, in increasing priority: the highest class
 * present in its time slice, where "running" needs the task to have run
 * for at least half of the slice and "ran" is any shorter running. */
enum { D_NONE, D_SUSP, D_READY, D_RAN, D_RUN, D_BLOCK, D_COUNT };

static const char *const disp_names[D_COUNT] = { "not alive", "suspended", "ready",
                                                 "ran briefly", "running", "blocking" };
static const char ascii_glyph[D_COUNT] = { ' ', '.', '-', '|', '#', '!' };
static const char *const utf8_glyph[D_COUNT] = { " ", "\xe2\x94\x80" /* ─ */,
                                                 "\xe2\x96\x91" /* ░ */, "\xe2\x96\x8c" /* ▌ */,
                                                 "\xe2\x96\x88" /* █ */, "\xe2\x96\x93" /* ▓ */ };
static const char *const ansi_color[D_COUNT] = { "", "\033[34m", "\033[33m", "\033[32m",
                                                 "\033[32m", "\033[1;31m" };

#define NAME_W 20            /* terminal name column: "name#id", truncated */
#define DEFAULT_LIMIT 40
#define EXACT_BUDGET 2000    /* a task with more events in the window is binned */
#define CELL_BUDGET 4        /* events read per column of a binned task */
#define SVG_W 1200           /* picture width, px */
#define SVG_NAME_W 190       /* name column, px */
#define SVG_LANE_W 970       /* lane width, px: also the binning resolution */
#define SVG_ROW_H 18
#define SVG_TOP 58

struct opts {
    const char *from_s, *to_s;   /* as given, for messages */
    int64_t from, to;            /* relative to the trace start; -1 unset */
    const char *glob;
    int64_t loop;                /* -1: all loops */
    long limit;
    const char *svg;
    bool no_color, ascii;
};

/* One stretch of time in one state. */
typedef struct span {
    int64_t s, e;                /* absolute ns, [s, e) clipped to the window */
    int st;                      /* ST_* */
    const char *reason;          /* static or owned by the lookup tables; may be NULL */
    int64_t arg;                 /* blocking: task id or -1 */
    int run_pm;                  /* per mille of [s, e) the task was running */
} span;

typedef struct spans {
    span *v;
    size_t n, cap;
} spans;

/* One row: a task, or a loop's blocking episodes. */
typedef struct lane {
    bool is_loop;
    int64_t id, loop;            /* task id (or loop id), its loop */
    char *name;                  /* task name (owned); NULL for a loop */
    int64_t alive_end;           /* absolute ns after which the task is gone */
    spans st;                    /* state spans, in time order */
    spans blk;                   /* blocking episodes */
    bool binned;                 /* st resolved per column: times are approximate */
    bool thread;                 /* generic mode: a loop thread's row */
    struct gcol *gc;             /* generic mode: per column sums (owned) */
} lane;

/* Generic mode: what one column of a loop thread's row holds, in ns (and
 * iterations), from the windows overlapping it. */
typedef struct gcol {
    double busy, wait, iters, cover;
} gcol;

/* What the whole command works on. */
typedef struct tl {
    ls_trace *t;
    int64_t start, end;          /* recording bounds (absolute) */
    int64_t from, to;            /* window (absolute), to exclusive */
    lane *lanes;
    size_t nlanes;
    char *susp_names[32], *wake_names[32], *sys_names[512]; /* lookup tables, by id */
    sqlite3_stmt *q_before, *q_after, *q_range, *q_count;
    bool generic;                /* generic loop mode: loop thread rows */
    char **owned;                /* strings spans point to (generic titles) */
    size_t nowned;
} tl;

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

static int on_opt(int c, const char *arg, void *ctx)
{
    struct opts *o = ctx;
    char *end;
    switch (c) {
    case 'f':
    case 't': {
        int64_t v = ls_parse_duration(arg);
        if (v < 0)
            return ls_error("timeline: invalid --%s '%s' (a time since the start of the trace, "
                            "e.g. 250ms, 1.5s)", c == 'f' ? "from" : "to", arg);
        if (c == 'f') {
            o->from = v;
            o->from_s = arg;
        } else {
            o->to = v;
            o->to_s = arg;
        }
        return 0;
    }
    case 'g':
        o->glob = arg;
        return 0;
    case 'L':
        o->loop = strtoll(arg, &end, 10);
        if (*end || end == arg || o->loop < 0)
            return ls_error("timeline: invalid --loop '%s' (a loop id, see 'loopscope info')", arg);
        return 0;
    case 'l':
        o->limit = strtol(arg, &end, 10);
        if (*end || end == arg || o->limit <= 0)
            return ls_error("timeline: invalid --limit '%s'", arg);
        return 0;
    case 's':
        o->svg = arg;
        return 0;
    case 'C':
        o->no_color = true;
        return 0;
    case 'A':
        o->ascii = true;
        return 0;
    }
    return 0;
}

/* ------------------------------------------------------------ reading */

/* Fill a by-id name table from a lookup table (ids beyond n are ignored). */
static bool load_names(tl *x, const char *sql, char **names, size_t n)
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
 * more than EXACT_BUDGET of them (then bin_task draws it). */
static bool exact_task(tl *x, lane *ln)
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
static void bin_task(tl *x, lane *ln, int ncols)
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
static bool load_blocking(tl *x)
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

/* ---------------------------------------------------------- rendering */

/* Display name "name#id", at most w bytes: the name is cut (ending in '~')
 * so that the id stays.  The name is escaped for the terminal (the SVG
 * shows the same label) and cut between characters. */
static void lane_label(const lane *ln, char *buf, size_t w)
{
    if (ln->is_loop) {
        snprintf(buf, w + 1, "%s %lld", ln->thread ? "thread" : "loop", (long long)ln->id);
        return;
    }
    char id[24];
    snprintf(id, sizeof(id), "#%lld", (long long)ln->id);
    size_t il = strlen(id), nl = 0;
    const char *full = ls_term(ln->name);
    if (strlen(full) + il <= w) {
        nl = strlen(full);
        memcpy(buf, full, nl);
    } else if (il + 2 <= w) {            /* "a_very_lon~#12" */
        const char *cut = ls_term_n(ln->name, w - il - 1);
        nl = strlen(cut);
        memcpy(buf, cut, nl);
        buf[nl++] = '~';
    } else {
        nl = 0;
        il = il < w ? il : w;
    }
    memcpy(buf + nl, id, il);
    buf[nl + il] = 0;
}

/* The column of a position (in columns, may be out of range or huge). */
static int col_of(double c, int ncols)
{
    return c < 0 ? 0 : c >= ncols ? ncols - 1 : (int)c;
}

/* What each of ncols columns shows (D_*): the highest-ranked state of
 * the spans touching it, "running" only if the task ran for half of it. */
static void lane_cells(const tl *x, const lane *ln, int ncols, unsigned char *cells,
                       double *run_out)
{
    static const unsigned char disp[ST_COUNT] = { D_NONE, D_SUSP, D_READY, D_RAN, D_BLOCK };
    double q = (double)(x->to - x->from) / ncols;
    double *run = calloc((size_t)ncols, sizeof(*run));
    memset(cells, D_NONE, (size_t)ncols);
    const spans *lists[2] = { &ln->st, &ln->blk };
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; i < lists[l]->n; i++) {
            const span *s = &lists[l]->v[i];
            int c0 = col_of((double)(s->s - x->from) / q, ncols);
            int c1 = col_of((double)(s->e - 1 - x->from) / q, ncols);
            for (int c = c0; c <= c1; c++) {
                if (disp[s->st] > cells[c])
                    cells[c] = disp[s->st];
                if (s->run_pm && run) {
                    double a = x->from + q * c, b = a + q;
                    double lo = s->s > a ? s->s : a, hi = s->e < b ? s->e : b;
                    if (hi > lo)
                        run[c] += (hi - lo) * s->run_pm / 1000.0;
                }
            }
        }
    for (int c = 0; run && c < ncols; c++)
        if (cells[c] == D_RAN && run[c] >= q / 2)
            cells[c] = D_RUN;
    if (run && run_out)
        memcpy(run_out, run, (size_t)ncols * sizeof(*run));
    free(run);
}

/* A tick step of about `want` ns: 1, 2 or 5 times a power of ten. */
static int64_t nice_step(double want)
{
    double p = pow(10, floor(log10(want > 1 ? want : 1)));
    double m = want / p;
    double k = m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10;
    if (!(k * p < 4e18))                 /* windows are at most 2^62 ns (clamped times) */
        return (int64_t)4e18;
    return (int64_t)(k * p) > 0 ? (int64_t)(k * p) : 1;
}

/* A tick label: "250ms", "1.5s", "60.72ms": the unit follows the size of
 * `top` (the largest label), the decimals the step. */
static void fmt_tick(char *buf, size_t n, int64_t v, int64_t step, int64_t top)
{
    static const struct { int64_t div; const char *unit; } units[] = {
        { 1000000000, "s" }, { 1000000, "ms" }, { 1000, "us" }, { 1, "ns" },
    };
    size_t u = 0;
    while (u < 3 && units[u].div > top)
        u++;
    int dec = 0;
    for (int64_t d = units[u].div; dec < 9 && step % d != 0; d /= 10)
        dec++;
    snprintf(buf, n, "%.*f%s", dec, (double)v / (double)units[u].div, units[u].unit);
}

/* A point in time for titles and headers, to the microsecond: "+60.730ms",
 * "+7.188466s" (relative to the trace start). */
static char *fmt_at(char *buf, size_t n, int64_t rel)
{
    if (rel < 1000000000 && rel > -1000000000)
        snprintf(buf, n, "+%.3fms", (double)rel / 1e6);
    else
        snprintf(buf, n, "+%.6fs", (double)rel / 1e9);
    return buf;
}

static int terminal_width(void)
{
    const char *c = getenv("COLUMNS");
    char *end;
    if (c && *c) {
        long v = strtol(c, &end, 10);
        if (!*end && v > 0 && v < 100000)
            return (int)v;
    }
    struct winsize ws;
    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 100;
}

/* Colours and UTF-8 glyphs only on a terminal that takes them. */
static void term_style(const struct opts *o, bool *color, bool *utf8)
{
    bool tty = isatty(STDOUT_FILENO);
    const char *nc = getenv("NO_COLOR");
    *color = tty && !o->no_color && !(nc && *nc);
    const char *cs = nl_langinfo(CODESET);
    *utf8 = tty && !o->ascii && cs && !strcmp(cs, "UTF-8");
}

/* One terminal row: the lane's label, then its cells' glyphs up to the
 * last one that is not blank. */
static void print_cells(const lane *ln, const unsigned char *cells, int ncols, bool color,
                        bool utf8)
{
    char label[NAME_W + 1];
    int last = ncols;
    while (last > 0 && cells[last - 1] == D_NONE)
        last--;
    lane_label(ln, label, NAME_W);
    printf("%-*s", NAME_W, label);
    if (last)
        putchar(' ');
    int prev = -1;
    for (int c = 0; c < last; c++) {
        int s = cells[c];
        if (color && s != prev)
            fputs(prev > ST_NONE ? "\033[0m" : "", stdout), fputs(ansi_color[s], stdout);
        prev = s;
        if (utf8)
            fputs(utf8_glyph[s], stdout);
        else
            putchar(ascii_glyph[s]);
    }
    if (color && prev > ST_NONE)
        fputs("\033[0m", stdout);
    putchar('\n');
}

/* The time axis under the rows, q ns per column. */
static void print_axis(const tl *x, int ncols, double q, bool utf8)
{
    /* The axis: a tick about every 12 columns, labels where they fit. */
    int64_t step = nice_step(q * 12);
    int64_t rel0 = x->from - x->start;
    char *ticks = malloc((size_t)ncols + 1), *labels = malloc((size_t)ncols + 64);
    memset(ticks, '-', (size_t)ncols);
    memset(labels, ' ', (size_t)ncols + 63);
    ticks[ncols] = 0;
    int label_end = 0;
    /* Times are clamped (ls_ts), so v cannot overflow; the count bounds the
     * loop whatever the step. */
    int64_t v = (rel0 + step - 1) / step * step;
    for (int k = 0; k <= ncols && v < x->to - x->start; k++, v += step) {
        double cd = (double)(v - rel0) / q;
        if (cd < 0 || cd >= ncols)
            continue;
        int c = (int)cd;
        ticks[c] = '+';
        char b[32];
        b[0] = '+';
        fmt_tick(b + 1, sizeof(b) - 1, v, step, x->to - x->start);
        size_t l = strlen(b);
        if (c >= label_end && c + (int)l <= ncols) {
            memcpy(labels + c, b, l);
            label_end = c + (int)l + 2;
        }
    }
    int ll = ncols;
    while (ll > 0 && labels[ll - 1] == ' ')
        ll--;
    labels[ll] = 0;
    if (utf8) {
        printf("%*s ", NAME_W, "");
        for (int c = 0; c < ncols; c++)
            fputs(ticks[c] == '+' ? "\xe2\x94\xbc" : "\xe2\x94\x80", stdout);
        putchar('\n');
    } else {
        printf("%*s %s\n", NAME_W, "", ticks);
    }
    if (ll)
        printf("%*s %s\n", NAME_W, "", labels);
    free(ticks);
    free(labels);
}

static void print_terminal(tl *x, const struct opts *o, const char *path, size_t ntasks,
                           size_t nmatch, int nloops)
{
    bool color, utf8;
    term_style(o, &color, &utf8);
    int width = terminal_width();
    int ncols = width - NAME_W - 1;
    if (ncols < 10)
        ncols = 10;
    double q = (double)(x->to - x->from) / ncols;
    char d1[32], d2[32], d3[32], d4[32];

    printf("%s: %zu task%s on %d loop%s, %s .. %s (%s), one column = %s\n", ls_term(path), ntasks,
           ntasks == 1 ? "" : "s", nloops, nloops == 1 ? "" : "s",
           fmt_at(d1, sizeof(d1), x->from - x->start), fmt_at(d2, sizeof(d2), x->to - x->start),
           ls_fmt_dur(d3, sizeof(d3), x->to - x->from), ls_fmt_dur(d4, sizeof(d4), (int64_t)q));

    unsigned char *cells = malloc((size_t)ncols);
    for (size_t i = 0; i < x->nlanes; i++) {
        lane_cells(x, &x->lanes[i], ncols, cells, NULL);
        print_cells(&x->lanes[i], cells, ncols, color, utf8);
    }
    free(cells);

    print_axis(x, ncols, q, utf8);

    /* The legend, then what was left out. */
    printf("legend:");
    for (int s = D_BLOCK; s >= D_SUSP; s--) {
        printf("%s%s", s == D_BLOCK ? " " : "  ", color ? ansi_color[s] : "");
        fputs(utf8 ? utf8_glyph[s] : (char[]){ ascii_glyph[s], 0 }, stdout);
        printf("%s %s%s", color ? "\033[0m" : "", disp_names[s],
               s == D_READY ? " (waiting for the loop)" : "");
    }
    printf("\n");
    if (nmatch > ntasks)
        printf("%zu more task%s in the window not shown (the %zu busiest are): "
               "use --limit, --tasks or --loop\n", nmatch - ntasks, nmatch - ntasks == 1 ? "" : "s",
               ntasks);
}

/* ---------------------------------------------------------------- SVG */

static void svg_rect(FILE *f, tl *x, const lane *ln, const span *s, double y, double h)
{
    double px = (double)SVG_LANE_W / (double)(x->to - x->from);
    double x0 = SVG_NAME_W + (double)(s->s - x->from) * px, w = (double)(s->e - s->s) * px;
    if (w < 1 && s->st != ST_SUSP)
        w = 1;                           /* short steps and episodes stay visible */
    char label[64], d1[32], d2[32];
    lane_label(ln, label, sizeof(label) - 1);
    fprintf(f, "<rect class=\"s%d\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\">"
               "<title>", s->st, x0, y, w, h);
    ls_xml_write(f, label);
    fprintf(f, ": %s", state_names[s->st]);
    if (s->reason) {
        fputs(" (", f);
        ls_xml_write(f, s->reason);
        if (ln->is_loop && s->arg >= 0)
            fprintf(f, " in task %lld", (long long)s->arg);
        fputc(')', f);
    }
    fprintf(f, "&#10;start %s, duration %s%s</title></rect>\n",
            fmt_at(d1, sizeof(d1), s->s - x->start), ls_fmt_dur(d2, sizeof(d2), s->e - s->s),
            ln->binned && s->st != ST_BLOCK ? " (approximate: a busy task drawn per pixel)" : "");
}

/* A lane with more spans than pixels, drawn like the terminal: per pixel
 * column, stretches of one display class, "ran briefly" in a lighter
 * green, each with its running share in the title. */
static void svg_dense(FILE *f, tl *x, const lane *ln, double y)
{
    static const int cls[D_COUNT] = { 0, 1, 2, 5, 3, 4 };   /* D_* -> CSS class s<N> */
    unsigned char *cells = malloc(SVG_LANE_W);
    double *run = calloc(SVG_LANE_W, sizeof(*run));
    if (!cells || !run) {
        free(cells);
        free(run);
        return;
    }
    lane_cells(x, ln, SVG_LANE_W, cells, run);
    double q = (double)(x->to - x->from) / SVG_LANE_W;
    char label[64], d1[32], d2[32];
    lane_label(ln, label, sizeof(label) - 1);
    for (int c = 0; c < SVG_LANE_W;) {
        int d = cells[c], e = c;
        double r = 0;
        while (e < SVG_LANE_W && cells[e] == d)
            r += run[e++];
        if (d != D_NONE && d != D_BLOCK) {   /* blocking: drawn from its own spans */
            bool thin = d == D_SUSP;
            int64_t s0 = x->from + (int64_t)(q * c), s1 = x->from + (int64_t)(q * e);
            fprintf(f, "<rect class=\"s%d\" x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\">"
                       "<title>", cls[d], SVG_NAME_W + c, y + (thin ? 7 : 3), e - c, thin ? 4 : 12);
            ls_xml_write(f, label);
            fprintf(f, ": %s, running %.3g%% of the time&#10;start %s, duration %s"
                       " (many short spans, drawn per pixel)</title></rect>\n",
                    disp_names[d], 100.0 * r / (double)(s1 - s0),
                    fmt_at(d1, sizeof(d1), s0 - x->start), ls_fmt_dur(d2, sizeof(d2), s1 - s0));
        }
        c = e;
    }
    free(cells);
    free(run);
}

/* The picture's start: prolog, styles, background, and the title's
 * "<text>PATH: " (the caller writes the rest of the title). */
static FILE *svg_open(const tl *x, const char *file, const char *path)
{
    FILE *f = fopen(file, "w");
    if (!f) {
        ls_error("timeline: cannot write '%s': %m", file);
        return NULL;
    }
    int h = SVG_TOP + (int)x->nlanes * SVG_ROW_H + 50;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
            SVG_W, h, SVG_W, h);
    fprintf(f, "<style>\n"
               "rect.s1 { fill: %s; } rect.s2 { fill: %s; } rect.s3 { fill: %s; }\n"
               "rect.s4 { fill: %s; fill-opacity: 0.9; } rect.s5 { fill: #9fd4a9; }\n"
               "rect:hover { stroke: #000; stroke-width: 1; }\n"
               "text.name { font-family: monospace; }\n"
               "line.grid { stroke: #ddd; stroke-width: 1; }\n"
               "</style>\n",
            svg_color[1], svg_color[2], svg_color[3], svg_color[4]);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n");
    fprintf(f, "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">");
    ls_xml_write(f, path);
    fputs(": ", f);
    return f;
}

typedef struct svg_leg {
    int cls;                     /* CSS class s<N> */
    const char *name;
} svg_leg;

/* The legend line: the classes, then the blocking class and a hint. */
static void svg_legend(FILE *f, const svg_leg *leg, size_t n, const char *blocking)
{
    int lx = 10;
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "<rect class=\"s%d\" x=\"%d\" y=\"%d\" width=\"14\" height=\"%d\"/>"
                   "<text x=\"%d\" y=\"42\">%s</text>\n", leg[i].cls, lx, leg[i].cls == 1 ? 35 : 31,
                leg[i].cls == 1 ? 4 : 12, lx + 18, leg[i].name);
        lx += 110;
    }
    fprintf(f, "<rect class=\"s4\" x=\"%d\" y=\"31\" width=\"14\" height=\"12\"/>"
               "<text x=\"%d\" y=\"42\">%s</text>\n", lx, lx + 18, blocking);
    fprintf(f, "<text x=\"%d\" y=\"42\" fill=\"#666\">hover a span for details</text>\n", lx + 170);
}

/* Grid lines and the time axis under the rows. */
static void svg_axis(FILE *f, const tl *x)
{
    double q = (double)(x->to - x->from) / SVG_LANE_W;
    int64_t step = nice_step(q * 90);
    int64_t rel0 = x->from - x->start;
    int axis_y = SVG_TOP + (int)x->nlanes * SVG_ROW_H + 6;
    fprintf(f, "<g>\n");
    int64_t v = (rel0 + step - 1) / step * step;
    for (int k = 0; k <= SVG_LANE_W && v <= x->to - x->start; k++, v += step) {
        double px = SVG_NAME_W + (double)(v - rel0) / q;
        char b[32];
        fmt_tick(b, sizeof(b), v, step, x->to - x->start);
        fprintf(f, "<line class=\"grid\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>"
                   "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#444\">+%s</text>\n",
                px, SVG_TOP - 4, px, axis_y, px, axis_y + 16, b);
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#444\"/>\n</g>\n",
            SVG_NAME_W, axis_y, SVG_NAME_W + SVG_LANE_W, axis_y);
}

/* A row's group, label and stripe; returns its top y (the caller closes
 * the group). */
static double svg_row_begin(FILE *f, const lane *ln, size_t i)
{
    double y = SVG_TOP + (double)i * SVG_ROW_H;
    char label[64];
    lane_label(ln, label, 26);
    fprintf(f, "<g>\n<text class=\"name\" x=\"10\" y=\"%.1f\"%s>", y + 12,
            ln->is_loop ? " font-weight=\"bold\"" : "");
    ls_xml_write(f, label);
    fprintf(f, "</text>\n");
    if (i % 2 == 0)
        fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"#f6f7f9\"/>\n",
                SVG_NAME_W, y, SVG_LANE_W, SVG_ROW_H);
    return y;
}

static bool svg_close(FILE *f, const char *file)
{
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0) {
        ls_error("timeline: cannot write '%s': %m", file);
        return false;
    }
    return true;
}

static bool write_svg(tl *x, const char *file, const char *path, size_t ntasks, size_t nmatch)
{
    FILE *f = svg_open(x, file, path);
    if (!f)
        return false;
    char d1[32], d2[32], d3[32];
    fprintf(f, "%zu task%s, %s .. %s (%s)", ntasks, ntasks == 1 ? "" : "s",
            fmt_at(d1, sizeof(d1), x->from - x->start), fmt_at(d2, sizeof(d2), x->to - x->start), ls_fmt_dur(d3, sizeof(d3), x->to - x->from));
    if (nmatch > ntasks)
        fprintf(f, ", %zu more not shown", nmatch - ntasks);
    fprintf(f, "</text>\n");
    static const svg_leg leg[] = {
        { 3, "running" }, { 5, "ran briefly" }, { 2, "ready" }, { 1, "suspended" },
    };
    svg_legend(f, leg, sizeof(leg) / sizeof(leg[0]), "blocking the loop");

    svg_axis(f, x);

    /* Rows. */
    for (size_t i = 0; i < x->nlanes; i++) {
        lane *ln = &x->lanes[i];
        double y = svg_row_begin(f, ln, i);
        if (ln->binned || ln->st.n > SVG_LANE_W / 4)
            svg_dense(f, x, ln, y);
        else
            for (size_t k = 0; k < ln->st.n; k++) {
                const span *s = &ln->st.v[k];
                bool thin = s->st == ST_SUSP;
                svg_rect(f, x, ln, s, y + (thin ? 7 : 3), thin ? 4 : 12);
            }
        for (size_t k = 0; k < ln->blk.n; k++)
            svg_rect(f, x, ln, &ln->blk.v[k], y + 1, 16);
        fprintf(f, "</g>\n");
    }
    return svg_close(f, file);
}

/* Nothing to draw: a picture that says so (--svg promises a file). */
static bool write_note_svg(const char *file, const char *path, const char *msg)
{
    FILE *f = fopen(file, "w");
    if (!f) {
        ls_error("timeline: cannot write '%s': %m", file);
        return false;
    }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"40\" "
               "viewBox=\"0 0 %d 40\" font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n"
               "<text x=\"10\" y=\"24\">", SVG_W, SVG_W);
    ls_xml_write(f, path);
    fputs(": ", f);
    ls_xml_write(f, msg);
    fputs("</text>\n</svg>\n", f);
    if (fclose(f) != 0) {
        ls_error("timeline: cannot write '%s': %m", file);
        return false;
    }
    return true;
}

/* ------------------------------------------------- generic loop mode */

/* What a generic column shows (D_*): blocked > busy for half of the time in
 * its iterations > busy for a tenth of it > waiting; blank without window. */
static void generic_cells(const tl *x, const lane *ln, int ncols, unsigned char *cells)
{
    lane_cells(x, ln, ncols, cells, NULL);      /* its blocking episodes */
    for (int c = 0; c < ncols; c++) {
        const gcol *g = &ln->gc[c];
        if (cells[c] == D_BLOCK || !(g->cover > 0))
            continue;
        double f = g->busy + g->wait > 0 ? g->busy / (g->busy + g->wait) : 0;
        cells[c] = f >= 0.5 ? D_RUN : f >= 0.1 ? D_RAN : D_SUSP;
    }
}

static void gcol_add(gcol *c, const gcol *d, double k)
{
    c->busy += d->busy * k;
    c->wait += d->wait * k;
    c->iters += d->iters * k;
    c->cover += d->cover * k;
}

/* A loop thread's windows in [from, to), each one's busy, wait and
 * iterations spread evenly over it, summed per column: the partial columns
 * at its ends directly, the whole ones through a difference array, so a
 * window costs O(1) however many columns it spans. */
static bool generic_fill(tl *x, lane *ln, int ncols)
{
    ln->gc = calloc((size_t)ncols, sizeof(*ln->gc));
    gcol *diff = calloc((size_t)ncols + 1, sizeof(*diff));
    if (!ln->gc || !diff) {
        free(diff);
        ls_error("out of memory");
        return false;
    }
    sqlite3_stmt *st = ls_prepare(x->t, "SELECT start_ns, end_ns, iterations, wait_ns, busy_ns"
                                        " FROM loop_windows WHERE loop_id = ?1 AND start_ns < ?3"
                                        " AND end_ns > ?2");
    if (!st) {
        free(diff);
        return false;
    }
    sqlite3_bind_int64(st, 1, ln->id);
    sqlite3_bind_int64(st, 2, x->from);
    sqlite3_bind_int64(st, 3, x->to);
    double q = (double)(x->to - x->from) / ncols;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t s = ls_col_ts(st, 0), e = ls_col_ts(st, 1), it = ls_col_ts(st, 2),
                wait = ls_col_ts(st, 3), busy = ls_col_ts(st, 4);
        if (e <= s || it < 0 || wait < 0 || busy < 0)
            continue;                    /* malformed: counted by info */
        double len = (double)(e - s);
        gcol dens = { (double)busy / len, (double)wait / len, (double)it / len, 1 };
        double a = (double)((s > x->from ? s : x->from) - x->from) / q;
        double b = (double)((e < x->to ? e : x->to) - x->from) / q;
        if (!(b > a))
            continue;
        int c0 = col_of(a, ncols), c1 = col_of(ceil(b) - 1, ncols);
        if (c0 >= c1) {
            gcol_add(&ln->gc[c0], &dens, (b - a) * q);
            continue;
        }
        gcol_add(&ln->gc[c0], &dens, (c0 + 1 - a) * q);
        gcol_add(&ln->gc[c1], &dens, (b - c1) * q);
        gcol_add(&diff[c0 + 1], &dens, q);
        gcol_add(&diff[c1], &dens, -q);
    }
    bool ok = ls_step_ok(x->t, st, rc);
    sqlite3_finalize(st);
    gcol run = { 0 };
    for (int c = 0; c < ncols; c++) {
        gcol_add(&run, &diff[c], 1);
        gcol_add(&ln->gc[c], &run, 1);
    }
    free(diff);
    return ok;
}

/* The first window start and the last window or episode end (absolute);
 * false when there is none. */
static bool generic_bounds(tl *x, int64_t *first, int64_t *last)
{
    bool win = ls_has_table(x->t, "loop_windows");
    sqlite3_stmt *st = ls_prepare(x->t, win
        ? "SELECT min(s), max(e) FROM (SELECT start_ns AS s, end_ns AS e FROM loop_windows"
          " WHERE end_ns > start_ns UNION ALL SELECT start_ns, start_ns + dur_ns FROM blocking"
          " WHERE dur_ns > 0)"
        : "SELECT min(start_ns), max(start_ns + dur_ns) FROM blocking WHERE dur_ns > 0");
    bool ok = st && sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL;
    if (ok) {
        *first = ls_col_ts(st, 0);
        *last = ls_col_ts(st, 1) - 1;
        if (*last < *first)
            *last = *first;
    }
    sqlite3_finalize(st);
    return ok;
}

static const char *const generic_names[D_COUNT] = {
    "no window", "waiting (in the wait call)", "?", "partly busy (10-50%)",
    "busy (half of the time or more)", "blocked (a blocking episode)",
};

/* A note under a generic picture or table: columns finer than windows. */
static void generic_note(const tl *x, double q, char *buf, size_t n)
{
    int64_t w = ls_meta_int(x->t, "window_ns", 0);
    char d[32];
    if (w > 0 && q < (double)w)
        snprintf(buf, n, "busy and wait times come from %s windows, spread evenly over each: "
                 "columns are finer than that, so approximate", ls_fmt_dur(d, sizeof(d), w));
    else
        buf[0] = 0;
}

static void generic_terminal(tl *x, const struct opts *o, const char *path, size_t nmatch)
{
    bool color, utf8;
    term_style(o, &color, &utf8);
    int ncols = terminal_width() - NAME_W - 1;
    if (ncols < 10)
        ncols = 10;
    double q = (double)(x->to - x->from) / ncols;
    char d1[32], d2[32], d3[32], d4[32], note[200];
    printf("%s: %zu loop thread%s (generic loop mode), %s .. %s (%s), one column = %s\n",
           ls_term(path), x->nlanes, x->nlanes == 1 ? "" : "s",
           fmt_at(d1, sizeof(d1), x->from - x->start), fmt_at(d2, sizeof(d2), x->to - x->start),
           ls_fmt_dur(d3, sizeof(d3), x->to - x->from), ls_fmt_dur(d4, sizeof(d4), (int64_t)q));
    unsigned char *cells = malloc((size_t)ncols);
    for (size_t i = 0; cells && i < x->nlanes; i++) {
        generic_cells(x, &x->lanes[i], ncols, cells);
        print_cells(&x->lanes[i], cells, ncols, color, utf8);
    }
    free(cells);
    print_axis(x, ncols, q, utf8);
    printf("legend:");
    static const int order[] = { D_BLOCK, D_RUN, D_RAN, D_SUSP };
    for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
        int s = order[k];
        printf("%s%s", k ? "  " : " ", color ? ansi_color[s] : "");
        fputs(utf8 ? utf8_glyph[s] : (char[]){ ascii_glyph[s], 0 }, stdout);
        printf("%s %s", color ? "\033[0m" : "", generic_names[s]);
    }
    printf("\n");
    generic_note(x, q, note, sizeof(note));
    if (note[0])
        printf("%s\n", note);
    if (nmatch > x->nlanes)
        printf("%zu more loop thread%s not shown: use --limit or --loop\n", nmatch - x->nlanes,
               nmatch - x->nlanes == 1 ? "" : "s");
}

static bool generic_svg(tl *x, const char *file, const char *path, size_t nmatch)
{
    FILE *f = svg_open(x, file, path);
    if (!f)
        return false;
    char d1[32], d2[32], d3[32], note[200];
    double q = (double)(x->to - x->from) / SVG_LANE_W;
    fprintf(f, "%zu loop thread%s (generic loop mode), %s .. %s (%s)", x->nlanes,
            x->nlanes == 1 ? "" : "s", fmt_at(d1, sizeof(d1), x->from - x->start),
            fmt_at(d2, sizeof(d2), x->to - x->start), ls_fmt_dur(d3, sizeof(d3), x->to - x->from));
    if (nmatch > x->nlanes)
        fprintf(f, ", %zu more not shown", nmatch - x->nlanes);
    generic_note(x, q, note, sizeof(note));
    if (note[0]) {
        fputs(" \xe2\x80\x94 ", f);
        ls_xml_write(f, note);
    }
    fprintf(f, "</text>\n");
    static const svg_leg leg[] = {
        { 3, "busy (half+)" }, { 5, "partly busy" }, { 1, "waiting" },
    };
    svg_legend(f, leg, sizeof(leg) / sizeof(leg[0]), "blocked");
    svg_axis(f, x);
    static const int cls[D_COUNT] = { 0, 1, 2, 5, 3, 4 };   /* D_* -> CSS class s<N> */
    unsigned char *cells = malloc(SVG_LANE_W);
    for (size_t i = 0; cells && i < x->nlanes; i++) {
        lane *ln = &x->lanes[i];
        double y = svg_row_begin(f, ln, i);
        char label[64];
        lane_label(ln, label, sizeof(label) - 1);
        generic_cells(x, ln, SVG_LANE_W, cells);
        for (int c = 0; c < SVG_LANE_W;) {
            int d = cells[c], e = c;
            gcol sum = { 0 };
            while (e < SVG_LANE_W && cells[e] == d)
                gcol_add(&sum, &ln->gc[e++], 1);
            if (d != D_NONE && d != D_BLOCK) {   /* blocking: drawn from its own spans */
                bool thin = d == D_SUSP;
                int64_t s0 = x->from + (int64_t)(q * c), s1 = x->from + (int64_t)(q * e);
                double in = sum.busy + sum.wait;
                fprintf(f, "<rect class=\"s%d\" x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\">"
                           "<title>", cls[d], SVG_NAME_W + c, y + (thin ? 7 : 3), e - c,
                        thin ? 4 : 12);
                ls_xml_write(f, label);
                fprintf(f, ": busy %.3g%%, waiting %.3g%%, about %.0f iterations&#10;"
                           "start %s, duration %s</title></rect>\n",
                        in > 0 ? 100 * sum.busy / in : 0.0, in > 0 ? 100 * sum.wait / in : 0.0,
                        sum.iters, fmt_at(d1, sizeof(d1), s0 - x->start),
                        ls_fmt_dur(d2, sizeof(d2), s1 - s0));
            }
            c = e;
        }
        for (size_t k = 0; k < ln->blk.n; k++)
            svg_rect(f, x, ln, &ln->blk.v[k], y + 1, 16);
        fprintf(f, "</g>\n");
    }
    free(cells);
    return svg_close(f, file);
}

/* The generic loop mode's timeline: a row per loop thread. */
static int timeline_generic(tl *x, const struct opts *o, const char *path)
{
    if (o->glob)
        return ls_error("timeline: --tasks selects task rows; a generic loop mode trace has loop "
                        "thread rows only (use --loop TID)");
    bool win = ls_has_table(x->t, "loop_windows");
    char sql[256];
    snprintf(sql, sizeof(sql), "SELECT id FROM (SELECT id FROM loops%s) WHERE ?1 IS NULL OR"
             " id = ?1 GROUP BY id ORDER BY id",
             win ? " UNION ALL SELECT DISTINCT loop_id FROM loop_windows" : "");
    sqlite3_stmt *st = ls_prepare(x->t, sql);
    if (!st)
        return 1;
    if (o->loop >= 0)
        sqlite3_bind_int64(st, 1, o->loop);
    x->lanes = calloc((size_t)o->limit, sizeof(*x->lanes));
    size_t nmatch = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (nmatch++ < (size_t)o->limit && x->lanes)
            x->lanes[x->nlanes++] = (lane){ .is_loop = true, .thread = true,
                                            .id = sqlite3_column_int64(st, 0),
                                            .loop = sqlite3_column_int64(st, 0) };
    bool ok = ls_step_ok(x->t, st, rc);
    sqlite3_finalize(st);
    if (!ok)
        return 1;
    int ncols = o->svg ? SVG_LANE_W : terminal_width() - NAME_W - 1;
    if (ncols < 10)
        ncols = 10;
    for (size_t i = 0; i < x->nlanes; i++)
        if (win ? !generic_fill(x, &x->lanes[i], ncols)
                : !(x->lanes[i].gc = calloc((size_t)ncols, sizeof(gcol))))
            return 1;
    if (!load_blocking(x))
        return 1;
    char d1[32], d2[32];
    if (!o->svg) {
        generic_terminal(x, o, path, nmatch);
        return 0;
    }
    if (!generic_svg(x, o->svg, path, nmatch))
        return 1;
    printf("wrote %s: %zu loop thread%s, %s .. %s\n", o->svg, x->nlanes,
           x->nlanes == 1 ? "" : "s", fmt_at(d1, sizeof(d1), x->from - x->start),
           fmt_at(d2, sizeof(d2), x->to - x->start));
    return 0;
}

/* ---------------------------------------------------------------- main */

static int cmp_lane(const void *a, const void *b)
{
    const lane *x = a, *y = b;
    if (x->loop != y->loop)
        return x->loop < y->loop ? -1 : 1;
    if (x->is_loop != y->is_loop)
        return x->is_loop ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void tl_release(tl *x)
{
    for (size_t i = 0; i < x->nlanes; i++) {
        free(x->lanes[i].name);
        free(x->lanes[i].st.v);
        free(x->lanes[i].blk.v);
        free(x->lanes[i].gc);
    }
    free(x->lanes);
    for (size_t i = 0; i < x->nowned; i++)
        free(x->owned[i]);
    free(x->owned);
    for (size_t i = 0; i < 32; i++) {
        free(x->susp_names[i]);
        free(x->wake_names[i]);
    }
    for (size_t i = 0; i < 512; i++)
        free(x->sys_names[i]);
    sqlite3_finalize(x->q_before);
    sqlite3_finalize(x->q_after);
    sqlite3_finalize(x->q_range);
    sqlite3_finalize(x->q_count);
    ls_trace_close(x->t);
}

/* The trace's first and last event times (absolute); false if none. */
static bool event_bounds(tl *x, int64_t *first, int64_t *last)
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

int cmd_timeline(int argc, char **argv)
{
    struct opts o = { .from = -1, .to = -1, .loop = -1, .limit = DEFAULT_LIMIT };
    static const struct option longopts[] = {
        { "from", required_argument, NULL, 'f' },
        { "to", required_argument, NULL, 't' },
        { "tasks", required_argument, NULL, 'g' },
        { "loop", required_argument, NULL, 'L' },
        { "limit", required_argument, NULL, 'l' },
        { "svg", required_argument, NULL, 's' },
        { "no-color", no_argument, NULL, 'C' },
        { "ascii", no_argument, NULL, 'A' },
        { 0 },
    };
    ls_optspec spec = { longopts, "", on_opt, &o };
    const char *path;
    int rc = ls_parse_common(argc, argv, usage, &path, NULL, &spec, NULL);
    if (rc)
        return rc;
    setlocale(LC_CTYPE, "");
    tl x = { 0 };
    x.t = ls_trace_open(path);
    if (!x.t)
        return 1;
    rc = 1;
    char d1[32], d2[32];
    x.start = ls_meta_ts(x.t, "start_ns", 0);
    x.end = ls_meta_ts(x.t, "end_ns", 0);

    if (o.loop >= 0) {
        sqlite3_stmt *st = ls_prepare(x.t, "SELECT count(*), (SELECT group_concat(id, ', ') FROM"
                                           " (SELECT id FROM loops ORDER BY id)) FROM loops WHERE id = ?");
        if (!st)
            goto out;
        sqlite3_bind_int64(st, 1, o.loop);
        sqlite3_step(st);
        if (sqlite3_column_int(st, 0) == 0) {
            const char *all = (const char *)sqlite3_column_text(st, 1);
            ls_error("timeline: no loop %lld in trace '%s' (loops: %s)", (long long)o.loop, path,
                     all ? all : "none");
            sqlite3_finalize(st);
            goto out;
        }
        sqlite3_finalize(st);
    }

    /* The window: default from the first event to the last (generic mode:
     * window or blocking episode). */
    x.generic = ls_is_generic(x.t);
    int64_t first, last;
    if (x.generic ? !generic_bounds(&x, &first, &last) : !event_bounds(&x, &first, &last)) {
        const char *none = x.generic ? "no loop windows or blocking episodes in this trace"
                                     : "no events in this trace";
        printf("%s: %s\n", ls_term(path), none);
        rc = o.svg && !write_note_svg(o.svg, path, none) ? 1 : 0;
        goto out;
    }
    int64_t rec_end = x.end > last ? x.end : last + 1;
    x.from = o.from >= 0 ? x.start + ls_ts(o.from) : first;
    x.to = o.to >= 0 ? x.start + ls_ts(o.to) : x.from > last ? rec_end : last + 1;
    if (o.from >= 0 && x.from >= rec_end) {
        ls_error("timeline: --from %s is past the end of the trace (+%s)", o.from_s,
                 ls_fmt_dur(d1, sizeof(d1), rec_end - x.start));
        goto out;
    }
    if (x.to <= x.from) {
        if (o.to >= 0 && o.from >= 0)
            ls_error("timeline: --to %s is not after --from %s", o.to_s, o.from_s);
        else if (o.to >= 0)
            ls_error("timeline: --to %s is before the first %s (+%s); give --from too", o.to_s,
                     x.generic ? "window" : "event", ls_fmt_dur(d1, sizeof(d1), first - x.start));
        else
            ls_error("timeline: empty window");
        goto out;
    }
    if (x.generic) {
        if (!load_names(&x, "SELECT nr, name FROM syscalls", x.sys_names, 512))
            goto out;
        rc = timeline_generic(&x, &o, path);
        goto out;
    }

    if (!load_names(&x, "SELECT id, name FROM suspend_reasons", x.susp_names, 32) ||
        !load_names(&x, "SELECT id, name FROM waker_kinds", x.wake_names, 32) ||
        !load_names(&x, "SELECT nr, name FROM syscalls", x.sys_names, 512))
        goto out;
    x.q_before = ls_prepare(x.t, "SELECT ts_ns, kind, reason FROM events WHERE task_id = ?1"
                                 " AND ts_ns < ?2 AND kind BETWEEN 3 AND 7"
                                 " ORDER BY ts_ns DESC, rowid DESC LIMIT 1");
    x.q_after = !x.q_before ? NULL : ls_prepare(x.t, "SELECT kind FROM events WHERE task_id = ?1 AND ts_ns > ?2"
                                " AND kind BETWEEN 3 AND 7 ORDER BY ts_ns, rowid LIMIT 1");
    x.q_range = !x.q_after ? NULL : ls_prepare(x.t, "SELECT ts_ns, kind, reason FROM events WHERE task_id = ?1"
                                " AND ts_ns >= ?2 AND ts_ns < ?3 AND kind BETWEEN 3 AND 7"
                                " ORDER BY ts_ns, rowid LIMIT ?4");
    x.q_count = !x.q_range ? NULL : ls_prepare(x.t, "SELECT count(*) FROM (SELECT 1 FROM events WHERE task_id = ?1"
                                " AND ts_ns >= ?2 AND ts_ns < ?3 LIMIT ?4)");
    if (!x.q_before || !x.q_after || !x.q_range || !x.q_count)
        goto out;

    /* The tasks alive in the window, busiest first: most steps and wakes
     * in the window, estimated from the task's totals (task_stats) and the
     * share of its life inside the window -- counting events would read
     * every index entry of the window. */
    sqlite3_stmt *st = ls_prepare(x.t,
        "SELECT id, loop_id, name, alive_end FROM ("
        " SELECT t.id, t.loop_id, t.name, coalesce(l.stopped_ns, ?3) AS alive_end,"
        "  coalesce(t.created_ns, 0) AS b, coalesce(t.ended_ns, l.stopped_ns, ?3) AS e,"
        "  coalesce(s.resumes, 0) + coalesce(s.wakes, 0) + 1 AS steps, coalesce(s.busy_ns, 0) AS busy"
        " FROM tasks t LEFT JOIN loops l ON l.id = t.loop_id"
        " LEFT JOIN task_stats s ON s.task_id = t.id"
        " WHERE (?4 IS NULL OR t.name GLOB ?4 OR t.name || '#' || t.id GLOB ?4)"
        "  AND (?5 IS NULL OR t.loop_id = ?5))"
        " WHERE b < ?2 AND e >= ?1"
        " ORDER BY steps * CAST(min(e, ?2) - max(b, ?1) AS REAL) / max(e - b, 1) DESC,"
        "  busy * CAST(min(e, ?2) - max(b, ?1) AS REAL) / max(e - b, 1) DESC, id");
    if (!st)
        goto out;
    sqlite3_bind_int64(st, 1, x.from);
    sqlite3_bind_int64(st, 2, x.to);
    sqlite3_bind_int64(st, 3, rec_end);
    if (o.glob)
        sqlite3_bind_text(st, 4, o.glob, -1, SQLITE_STATIC);
    if (o.loop >= 0)
        sqlite3_bind_int64(st, 5, o.loop);
    x.lanes = calloc((size_t)o.limit + 64, sizeof(*x.lanes));
    size_t nmatch = 0, ntasks = 0;
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        if (nmatch++ >= (size_t)o.limit)
            continue;
        lane *ln = &x.lanes[x.nlanes++];
        ln->id = sqlite3_column_int64(st, 0);
        ln->loop = sqlite3_column_int64(st, 1);
        const char *nm = (const char *)sqlite3_column_text(st, 2);
        ln->name = strdup(nm ? nm : "?");
        ln->alive_end = ls_col_ts(st, 3);
        ntasks++;
    }
    bool ok = ls_step_ok(x.t, st, step);
    sqlite3_finalize(st);
    if (!ok)
        goto out;
    if (!ntasks) {
        char msg[512];
        if (o.glob)
            snprintf(msg, sizeof(msg), "no task matching '%s'%s is alive in the window (%s .. %s)",
                     o.glob, o.loop >= 0 ? " on that loop" : "",
                     fmt_at(d1, sizeof(d1), x.from - x.start), fmt_at(d2, sizeof(d2), x.to - x.start));
        else
            snprintf(msg, sizeof(msg), "no task%s is alive in the window (%s .. %s)",
                     o.loop >= 0 ? " of that loop" : "", fmt_at(d1, sizeof(d1), x.from - x.start),
                     fmt_at(d2, sizeof(d2), x.to - x.start));
        printf("%s\n", ls_term(msg));
        rc = o.svg && !write_note_svg(o.svg, path, msg) ? 1 : 0;
        goto out;
    }

    /* A row per loop of the shown tasks that blocked in the window. */
    sqlite3_stmt *lb = ls_prepare(x.t, "SELECT DISTINCT loop_id FROM blocking"
                                       " WHERE start_ns < ?2 AND start_ns + dur_ns > ?1 ORDER BY 1");
    if (!lb)
        goto out;
    sqlite3_bind_int64(lb, 1, x.from);
    sqlite3_bind_int64(lb, 2, x.to);
    int nloops_seen = 0;
    while ((step = sqlite3_step(lb)) == SQLITE_ROW && nloops_seen < 63) {
        int64_t loop = sqlite3_column_int64(lb, 0);
        bool shown = false;
        for (size_t i = 0; i < ntasks; i++)
            shown |= x.lanes[i].loop == loop;
        if (shown) {
            x.lanes[x.nlanes++] = (lane){ .is_loop = true, .id = loop, .loop = loop };
            nloops_seen++;
        }
    }
    ok = ls_step_ok(x.t, lb, step);
    sqlite3_finalize(lb);
    if (!ok)
        goto out;
    qsort(x.lanes, x.nlanes, sizeof(*x.lanes), cmp_lane);

    int ncols = o.svg ? SVG_LANE_W : terminal_width() - NAME_W - 1;
    if (ncols < 10)
        ncols = 10;
    int nloops = 0;
    int64_t prev_loop = -1;
    for (size_t i = 0; i < x.nlanes; i++) {
        lane *ln = &x.lanes[i];
        if (ln->loop != prev_loop)
            nloops++;
        prev_loop = ln->loop;
        if (!ln->is_loop && !exact_task(&x, ln))
            bin_task(&x, ln, ncols);
    }
    if (!load_blocking(&x))
        goto out;

    if (o.svg) {
        if (!write_svg(&x, o.svg, path, ntasks, nmatch))
            goto out;
        printf("wrote %s: %zu task%s, %s .. %s\n", o.svg, ntasks, ntasks == 1 ? "" : "s",
               fmt_at(d1, sizeof(d1), x.from - x.start), fmt_at(d2, sizeof(d2), x.to - x.start));
        if (nmatch > ntasks)
            printf("%zu more task%s in the window not shown: use --limit, --tasks or --loop\n",
                   nmatch - ntasks, nmatch - ntasks == 1 ? "" : "s");
    } else {
        print_terminal(&x, &o, path, ntasks, nmatch, nloops);
    }
    rc = 0;
out:
    tl_release(&x);
    return rc;
}
