/*
 * cmd_timeline.c -- `loopscope timeline TRACE`: swimlanes, one row per
 * task, showing when it was running, ready (woken, waiting for the loop),
 * suspended or blocking the loop, fitted to the terminal width; or, with
 * --svg, the same timeline as a picture whose spans carry hover titles.
 * This file is the command: options, the window, which tasks are shown
 * (at most --limit: the busiest in the window, estimated from task_stats
 * without reading events).  The parts are listed in timeline.h; the tables
 * read are described in tracer/SCHEMA.md.
 */
#include "commands.h"
#include "timeline.h"

#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    "A trace of the generic loop mode (a process not built on libevl) gets one\n"
    "row per loop thread (\"thread TID\"; --loop TID picks one) from its\n"
    "iteration windows (loop_windows): per column blocked (a blocking episode) >\n"
    "busy for at least half of the time (not in the wait call) > partly busy\n"
    "(10% or more) > waiting; blank: no window.  A window's busy and wait times\n"
    "are spread evenly over it, so columns finer than the windows are\n"
    "approximate.  With a task lifecycle (its asyncio tasks read by a census\n"
    "every few ms) its task rows are drawn as above, from the states the\n"
    "censuses saw, under their thread's row, and the window runs to the end of\n"
    "the recording; without one the thread rows are all (--limit caps them,\n"
    "--tasks does not apply).\n"
    "\n"
    "example: loopscope timeline trace.db --from 1.5s --to 1.7s --tasks 'handle_conn*'\n";

#define DEFAULT_LIMIT 40

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
    free(x->source);
    sqlite3_finalize(x->q_before);
    sqlite3_finalize(x->q_after);
    sqlite3_finalize(x->q_range);
    sqlite3_finalize(x->q_count);
    ls_trace_close(x->t);
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
    x.start = ls_meta_ts(x.t, LS_META_START_NS, 0);
    x.end = ls_meta_ts(x.t, LS_META_END_NS, 0);

    if (o.loop >= 0) {
        /* a generic loop by its thread too (a process group's loop ids are not tids) */
        sqlite3_stmt *st = ls_prepare(x.t, "SELECT count(*), (SELECT group_concat(k, ', ') FROM"
                                           " (SELECT CASE WHEN ?2 THEN tid ELSE id END AS k FROM loops"
                                           " ORDER BY k)) FROM loops WHERE id = ?1 OR (?2 AND tid = ?1)");
        if (!st)
            goto out;
        sqlite3_bind_int64(st, 1, o.loop);
        sqlite3_bind_int(st, 2, ls_is_generic(x.t));
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
     * window or blocking episode; with a lifecycle, both). */
    x.generic = ls_is_generic(x.t);
    x.lifecycle = ls_has_lifecycle(x.t);
    x.source = ls_lifecycle_text(x.t);
    int64_t first, last, gfirst, glast;
    bool have = x.lifecycle && tl_event_bounds(&x, &first, &last);
    if (x.generic && tl_generic_bounds(&x, &gfirst, &glast)) {
        first = have && first < gfirst ? first : gfirst;
        last = have && last > glast ? last : glast;
        have = true;
    }
    /* A census's tasks stay in the state it last saw until the end: the
     * window runs to the end of the recording. */
    if (have && x.source && x.end > last)
        last = x.end - 1;
    if (!have) {
        const char *none = !x.lifecycle ? "no loop windows or blocking episodes in this trace"
                                        : "no events in this trace";
        printf("%s: %s\n", ls_term(path), none);
        rc = o.svg && !tl_write_note_svg(o.svg, path, none) ? 1 : 0;
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
                     !x.lifecycle ? "window" : "event", ls_fmt_dur(d1, sizeof(d1), first - x.start));
        else
            ls_error("timeline: empty window");
        goto out;
    }
    if (!x.lifecycle) {
        if (!tl_load_names(&x, "SELECT nr, name FROM syscalls", x.sys_names, 512))
            goto out;
        rc = tl_timeline_generic(&x, &o, path);
        goto out;
    }

    if (!tl_load_names(&x, "SELECT id, name FROM suspend_reasons", x.susp_names, 32) ||
        !tl_load_names(&x, "SELECT id, name FROM waker_kinds", x.wake_names, 32) ||
        !tl_load_names(&x, "SELECT nr, name FROM syscalls", x.sys_names, 512))
        goto out;
    if (!tl_prepare_reads(&x))
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
                     tl_fmt_at(d1, sizeof(d1), x.from - x.start), tl_fmt_at(d2, sizeof(d2), x.to - x.start));
        else
            snprintf(msg, sizeof(msg), "no task%s is alive in the window (%s .. %s)",
                     o.loop >= 0 ? " of that loop" : "", tl_fmt_at(d1, sizeof(d1), x.from - x.start),
                     tl_fmt_at(d2, sizeof(d2), x.to - x.start));
        printf("%s\n", ls_term(msg));
        rc = o.svg && !tl_write_note_svg(o.svg, path, msg) ? 1 : 0;
        goto out;
    }

    /* A row per loop of the shown tasks that blocked in the window; in a
     * generic trace, a row per loop thread (its iteration windows and
     * blocking, as a generic trace without a lifecycle shows them). */
    sqlite3_stmt *lb = x.generic
        ? ls_prepare(x.t, ls_has_table(x.t, "loop_windows")
              ? "SELECT id FROM (SELECT id FROM loops UNION ALL SELECT DISTINCT loop_id"
                " FROM loop_windows) WHERE ?3 IS NULL OR id = ?3 GROUP BY id ORDER BY id"
              : "SELECT id FROM loops WHERE ?3 IS NULL OR id = ?3 ORDER BY id")
        : ls_prepare(x.t, "SELECT DISTINCT loop_id FROM blocking"
                          " WHERE start_ns < ?2 AND start_ns + dur_ns > ?1 ORDER BY 1");
    if (!lb)
        goto out;
    sqlite3_bind_int64(lb, 1, x.from);
    sqlite3_bind_int64(lb, 2, x.to);
    if (x.generic && o.loop >= 0)
        sqlite3_bind_int64(lb, 3, o.loop);
    int nloops_seen = 0;
    while ((step = sqlite3_step(lb)) == SQLITE_ROW && nloops_seen < 63) {
        int64_t loop = sqlite3_column_int64(lb, 0);
        bool shown = x.generic;
        for (size_t i = 0; i < ntasks; i++)
            shown |= x.lanes[i].loop == loop;
        if (shown) {
            x.lanes[x.nlanes++] = (lane){ .is_loop = true, .thread = x.generic, .id = loop,
                                          .loop = loop };
            nloops_seen++;
        }
    }
    ok = ls_step_ok(x.t, lb, step);
    sqlite3_finalize(lb);
    if (!ok)
        goto out;
    qsort(x.lanes, x.nlanes, sizeof(*x.lanes), cmp_lane);

    int ncols = o.svg ? SVG_LANE_W : tl_terminal_width() - NAME_W - 1;
    if (ncols < 10)
        ncols = 10;
    int nloops = 0;
    int64_t prev_loop = -1;
    for (size_t i = 0; i < x.nlanes; i++) {
        lane *ln = &x.lanes[i];
        if (ln->loop != prev_loop)
            nloops++;
        prev_loop = ln->loop;
        if (!ln->is_loop && !tl_exact_task(&x, ln))
            tl_bin_task(&x, ln, ncols);
        if (ln->thread && !tl_thread_fill(&x, ln, ncols))
            goto out;
    }
    if (!tl_load_blocking(&x))
        goto out;

    if (o.svg) {
        if (!tl_write_svg(&x, o.svg, path, ntasks, nmatch))
            goto out;
        printf("wrote %s: %zu task%s, %s .. %s\n", o.svg, ntasks, ntasks == 1 ? "" : "s",
               tl_fmt_at(d1, sizeof(d1), x.from - x.start), tl_fmt_at(d2, sizeof(d2), x.to - x.start));
        if (nmatch > ntasks)
            printf("%zu more task%s in the window not shown: use --limit, --tasks or --loop\n",
                   nmatch - ntasks, nmatch - ntasks == 1 ? "" : "s");
    } else {
        tl_print_terminal(&x, &o, path, ntasks, nmatch, nloops);
    }
    rc = 0;
out:
    tl_release(&x);
    return rc;
}
