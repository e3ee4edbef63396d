/*
 * cmd_export.c -- `loopscope export TRACE [--format perfetto|chrome-json]
 * -o FILE`: the trace for ui.perfetto.dev, in Perfetto's protobuf trace
 * format (the default; export_proto.c) or the Chrome trace event JSON
 * (export_json.c).  What is exported, walking the trace once, is
 * export_model.c and export_loops.c; the interface between them and the
 * writers is export.h.  Schema of the input: tracer/SCHEMA.md; the mapping
 * is in the usage text below.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "evchunk.h"
#include "export.h"
#include "trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: loopscope export TRACE [--format perfetto|chrome-json] -o FILE [--from DUR] [--to DUR]\n"
    "\n"
    "Write the trace to open in https://ui.perfetto.dev (or, as JSON, in\n"
    "chrome://tracing).\n"
    "\n"
    "  --format F   perfetto: Perfetto's protobuf trace format (the default;\n"
    "               its packets deflated in chunks, as Perfetto's own traces\n"
    "               may be: about a tenth of the JSON's size);\n"
    "               chrome-json: the Chrome/Perfetto Trace Event Format (JSON)\n"
    "  -o FILE      where to write it; '-' for stdout\n"
    "  --from DUR   only what happens from DUR after the recording start (e.g. 4.5s)\n"
    "  --to DUR     ... up to DUR after the start; slices are clipped to the window\n"
    "\n"
    "What you see: a process per loop (\"loop N (tid T)\"), holding\n"
    "  - the loop thread's track (sorted first): slices \"idle (epoll_wait)\"\n"
    "    from poll_enter to poll_exit, \"iteration\" from poll_exit to the next\n"
    "    poll_enter (running the ready callbacks), and \"callback\" for plain\n"
    "    callbacks inside it;\n"
    "  - a track per task (named \"NAME (id N)\", in order of appearance) with\n"
    "    back-to-back slices: \"running\" (a step, task_run to the next suspend\n"
    "    or finish), \"suspended: REASON\" (sleep, io, future, task, yield,\n"
    "    executor, gather; until the wake) and \"ready\" (woken or created,\n"
    "    waiting for the loop to run it); the category is the state;\n"
    "  - blocking episodes as slices inside the step that blocked, named\n"
    "    \"BLOCKING off-cpu read\" or \"BLOCKING on-cpu\", category \"blocking\",\n"
    "    with the call site, the syscall and the tasks it delayed in args;\n"
    "  - instants for cancel requests, failures and leak verdicts;\n"
    "  - flow arrows (category \"wake\") from the waker to the woken task's next\n"
    "    step: from the task that was running when the wake happened (a cancel,\n"
    "    a task completing a future inline), or, for a wake by task completion,\n"
    "    from the end of the awaited task's last step.\n"
    "\n"
    "A trace of the generic loop mode (a process not built on libevl) has a\n"
    "process per loop thread (\"loop thread T\") whose track holds every\n"
    "blocking episode (args: the asyncio task, when there was one) and the\n"
    "counters of its iteration windows (loop_windows): \"loop busy_pct\" (share\n"
    "of the window not in the wait call), \"loop unknown_pct\" (share neither\n"
    "busy nor waiting: not accounted for, never counted busy), \"loop\n"
    "iterations_per_s\" and \"loop longest_iteration_ms\", each set at a\n"
    "window's start and back to 0 where windows stop.  With a task lifecycle (its asyncio tasks read by a census\n"
    "every few ms) a track per task as above, in its loop thread's process,\n"
    "with the states the censuses saw: \"woken_by\" is \"unknown\" and no wake\n"
    "arrows are drawn (a census does not see who woke a task).\n"
    "\n"
    "example: loopscope export trace.db -o trace.pftrace --from 4s --to 5s\n";

struct opts {
    bool json;
    const char *out;
    int64_t from, to;          /* offsets from start_ns; -1 = not given */
};

static int on_opt(int c, const char *arg, void *ctx)
{
    struct opts *o = ctx;
    switch (c) {
    case 'f':
        if (strcmp(arg, "perfetto") != 0 && strcmp(arg, "chrome-json") != 0)
            return ls_error("export: unknown format '%s' (supported: perfetto, chrome-json)", arg);
        o->json = !strcmp(arg, "chrome-json");
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

/* The meta values shown with the trace (JSON otherData). */
static const char *const meta_keys[] = {
    LS_META_TOOL, LS_META_TARGET_CMDLINE, LS_META_TARGET_PID, LS_META_HOST, LS_META_KERNEL,
    LS_META_START_UTC, LS_META_MODE, LS_META_BLOCK_THRESHOLD_NS, LS_META_DROPPED_MESSAGES,
    LS_META_DROPPED_BYTES, LS_META_REJECTED_RECORDS, LS_META_READ_ERRORS,
    LS_META_DROPPED_EVENTS_CLAIMED, LS_META_DROPPED_EVENTS, LS_META_LOST_EPISODES,
    LS_META_LOOP_LOST_RECORDS_CLAIMED,
};
#define NMETA (sizeof(meta_keys) / sizeof(meta_keys[0]))

/* The recording's start (ts 0 of the output) and end. */
static bool time_range(ls_trace *t, int64_t *start, int64_t *end)
{
    *start = ls_meta_ts(t, LS_META_START_NS, -1);
    *end = ls_meta_ts(t, LS_META_END_NS, -1);
    sqlite3_stmt *st = ls_prepare(t, "SELECT " LS_SQL_EVENTS_MIN_TS ", " LS_SQL_EVENTS_MAX_TS);
    if (!st)
        return false;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
        int64_t lo = ls_col_ts(st, 0), hi = ls_col_ts(st, 1);
        if (*start < 0 || lo < *start)
            *start = lo;          /* ts must not go negative */
        if (*end < hi)
            *end = hi;
    }
    sqlite3_finalize(st);
    if (*start < 0)
        *start = 0;
    if (*end < *start)
        *end = *start;
    return true;
}

int cmd_export(int argc, char **argv)
{
    struct opts o = { .from = -1, .to = -1 };
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
    /* One thread: SQLite's mutexes cost 5% of a large export (ignored if
     * SQLite is already initialized). */
    sqlite3_config(SQLITE_CONFIG_SINGLETHREAD);
    ls_trace *t = ls_trace_open(path);
    if (!t)
        return 1;
    int64_t start, end;
    if (!ls_create_app_frames(t) || !time_range(t, &start, &end)) {
        ls_trace_close(t);
        return 1;
    }
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
    ls_xwriter *w = o.json ? ls_export_json_new(f, start) : ls_export_proto_new(f, start);
    bool ok = w != NULL;
    if (ok) {
        ls_xmeta meta[NMETA];
        char *vals[NMETA];
        int n = 0;
        for (size_t i = 0; i < NMETA; i++)
            if ((vals[n] = ls_meta(t, meta_keys[i])))
                meta[n] = (ls_xmeta){ meta_keys[i], vals[n] }, n++;
        w->ops->begin(w, meta, n);
        for (int i = 0; i < n; i++)
            free(vals[i]);
        ok = ls_export_run(t, w, o.from >= 0 ? start + ls_ts(o.from) : INT64_MIN,
                           o.to >= 0 ? start + ls_ts(o.to) : INT64_MAX, end);
        ok = w->ops->end(w) && ok;
        w->ops->free(w);
    } else {
        ls_error("export: out of memory");
    }
    ls_trace_close(t);
    if (to_stdout)
        return ok && fflush(f) == 0 ? 0 : 1;
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
