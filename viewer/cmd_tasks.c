/*
 * cmd_tasks.c -- `loopscope tasks TRACE`: one row per task, like
 * tokio-console's task list.  The per-task numbers come from the
 * task_stats table the recorder computes when capture ends.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "output.h"
#include "trace.h"
#include "ls_codes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: loopscope tasks TRACE [--sort KEY] [--state STATE] [--name GLOB] [--limit N] [--json]\n"
    "\n"
    "One row per task: state, when it was created, lifetime, busy (running),\n"
    "sched (ready, waiting for the loop), idle (suspended), resumes, wakes,\n"
    "longest step, blocking episodes.\n"
    "\n"
    "  --sort KEY      id (default), name, created, lifetime, busy, sched, idle,\n"
    "                  resumes, wakes, longest, blocking (largest first)\n"
    "  --state STATE   finished, failed, cancelled, pending, leaked\n"
    "  --name GLOB     only tasks whose name matches (e.g. 'handle_conn#*')\n"
    "  --limit N       at most N rows\n"
    "  --json          JSON array instead of a table\n"
    "\n"
    "A trace of the generic loop mode (a process not built on libevl) whose\n"
    "asyncio tasks the recorder read by a census every few ms (`info` says so)\n"
    "has this table too, from the states the censuses saw (its times are census\n"
    "times: a state entered and left between two censuses is not seen; no\n"
    "parent), with BLOCKED (blocked time) and MAXBLOCK (longest episode) after\n"
    "BLOCK; a task no census saw, named in a blocking episode only, is 'unknown'.\n"
    "Without a census it has no task lifecycle: the command says so in one line\n"
    "and lists the asyncio tasks named in blocking episodes instead (id: the\n"
    "recorder's hash of the Task object's address and name, loop thread,\n"
    "episodes, blocked time, longest), exit status 0; --sort takes id, name or\n"
    "blocking there, --state is refused.\n"
    "\n"
    "example: loopscope tasks trace.db --sort busy --limit 10\n";

struct opts {
    const char *sort, *state, *name;
    long limit;
};

static const struct { const char *key, *expr; } sorts[] = {
    { "id", "id" },
    { "name", "name, id" },
    { "created", "created_ns, id" },
    { "lifetime", "lifetime DESC, id" },
    { "busy", "busy_ns DESC, id" },
    { "sched", "scheduled_ns DESC, id" },
    { "idle", "idle_ns DESC, id" },
    { "resumes", "resumes DESC, id" },
    { "wakes", "wakes DESC, id" },
    { "longest", "longest_step_ns DESC, id" },
    { "blocking", "blocked_ns DESC, id" },
};

static int on_opt(int c, const char *arg, void *ctx)
{
    struct opts *o = ctx;
    char *end;
    switch (c) {
    case 's':
        for (size_t i = 0; i < sizeof(sorts) / sizeof(sorts[0]); i++)
            if (!strcmp(arg, sorts[i].key)) {
                o->sort = sorts[i].expr;
                return 0;
            }
        return ls_error("tasks: unknown sort key '%s' (see 'loopscope tasks --help')", arg);
    case 'S':
        if (strcmp(arg, "finished") && strcmp(arg, "failed") && strcmp(arg, "cancelled") &&
            strcmp(arg, "pending") && strcmp(arg, "leaked"))
            return ls_error("tasks: unknown state '%s' (finished, failed, cancelled, pending, leaked)", arg);
        o->state = arg;
        return 0;
    case 'n':
        o->name = arg;
        return 0;
    case 'l':
        o->limit = strtol(arg, &end, 10);
        if (*end || o->limit <= 0)
            return ls_error("tasks: invalid --limit '%s'", arg);
        return 0;
    }
    return 0;
}

/* Generic mode: no lifecycle; the asyncio tasks of blocking episodes. */
static int generic_tasks(ls_trace *t, const struct opts *o, bool json)
{
    if (o->state) {
        ls_error("tasks: --state needs task lifecycle, which a generic loop mode trace does not "
                 "have");
        return 1;
    }
    const char *order = !strcmp(o->sort, "name, id") ? "t.name, t.id"
                        : !strcmp(o->sort, "blocked_ns DESC, id") ? "blocked DESC, t.id" : "t.id";
    char *sql = NULL;
    if (asprintf(&sql,
        "SELECT t.id, t.name, t.loop_id, count(b.id),"
        "  CAST(total(max(b.dur_ns, 0)) AS INTEGER) AS blocked, coalesce(max(b.dur_ns), 0)"
        " FROM tasks t LEFT JOIN blocking b ON b.task_id = t.id"
        " WHERE (?1 IS NULL OR t.name GLOB ?1) GROUP BY t.id ORDER BY %s LIMIT ?2", order) < 0)
        return 1;
    sqlite3_stmt *st = ls_prepare(t, sql);
    free(sql);
    if (!st)
        return 1;
    if (o->name)
        sqlite3_bind_text(st, 1, o->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, o->limit > 0 ? o->limit : -1);
    static const ls_col cols[] = {
        { "ID", "id", true }, { "NAME", "name", false }, { "THREAD", "loop_id", true },
        { "BLOCK", "blocking", true }, { "BLOCKED", "blocked_ns", true },
        { "LONGEST", "longest_blocking_ns", true },
    };
    ls_table *tab = ls_table_new(cols, sizeof(cols) / sizeof(cols[0]));
    int step;
    size_t rows = 0;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        /* The recorder's id for the task (a hash of the Task object's
         * address and name: addresses are reused), not an address. */
        ls_table_int(tab, sqlite3_column_int64(st, 0));
        ls_table_str(tab, (const char *)sqlite3_column_text(st, 1));
        ls_table_int(tab, sqlite3_column_int64(st, 2));
        ls_table_int(tab, sqlite3_column_int64(st, 3));
        ls_table_dur(tab, ls_col_ts(st, 4));
        ls_table_dur(tab, ls_col_ts(st, 5));
        rows++;
    }
    bool ok = ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    if (!ok) {
        ls_table_free(tab);
        return 1;
    }
    if (!json)
        printf("generic loop mode: no task lifecycle (the process is not built on libevl); "
               "%zu asyncio task%s named in blocking episodes%s\n", rows, rows == 1 ? "" : "s",
               rows ? ":" : "");
    if (json || rows)
        ls_table_print(tab, stdout, json);
    else
        ls_table_free(tab);
    return 0;
}

int cmd_tasks(int argc, char **argv)
{
    struct opts o = { .sort = "id" };
    static const struct option longopts[] = {
        { "sort", required_argument, NULL, 's' },
        { "state", required_argument, NULL, 'S' },
        { "name", required_argument, NULL, 'n' },
        { "limit", required_argument, NULL, 'l' },
        { 0 },
    };
    ls_optspec spec = { longopts, "", on_opt, &o };
    const char *path;
    bool json = false;
    int rc = ls_parse_common(argc, argv, usage, &path, &json, &spec, NULL);
    if (rc)
        return rc;
    ls_trace *t = ls_trace_open(path);
    if (!t)
        return 1;
    if (!ls_has_lifecycle(t)) {
        rc = generic_tasks(t, &o, json);
        ls_trace_close(t);
        return rc;
    }
    /* A generic trace keeps its blocking columns (blocked time, longest
     * episode) next to the lifecycle's. */
    bool generic = ls_is_generic(t);
    char *source = ls_lifecycle_text(t);
    int64_t start = ls_meta_int(t, LS_META_START_NS, 0), end = ls_meta_int(t, LS_META_END_NS, 0);
    char *sql = NULL;
    /* A task without task_stats has no lifecycle event the replay could
     * follow (a census never saw it: named in a blocking episode only; or
     * beyond the recorder's live-task table): its state is unknown. */
    if (asprintf(&sql,
        "SELECT * FROM (SELECT t.id, t.name, t.parent_id,"
        "  CASE t.final_state WHEN " LS_SQL_STATE_FINISHED " THEN 'finished'"
        "   WHEN " LS_SQL_STATE_FAILED " THEN 'failed' WHEN " LS_SQL_STATE_CANCELLED " THEN 'cancelled'"
        "  ELSE CASE WHEN t.leak IS NOT NULL THEN 'leaked'"
        "       WHEN s.task_id IS NULL THEN 'unknown' ELSE 'pending' END END AS state,"
        "  t.created_ns - ?1 AS created, coalesce(t.ended_ns, ?2) - t.created_ns AS lifetime,"
        "  s.busy_ns, s.scheduled_ns, s.idle_ns, s.resumes, s.wakes, s.longest_step_ns,"
        "  %s AS blocking, t.error, t.preexisting, t.created_ns, %s AS blocked_ns, %s AS max_blocking"
        " FROM tasks t LEFT JOIN task_stats s ON s.task_id = t.id%s"
        " WHERE (?3 IS NULL OR t.name GLOB ?3))"
        " WHERE (?4 IS NULL OR state = ?4)"
        " ORDER BY %s LIMIT ?5",
        generic ? "coalesce(b.n, 0)" : "s.blocking",
        generic ? "coalesce(b.total, 0)" : "s.blocked_ns",
        generic ? "coalesce(b.longest, 0)" : "0",
        /* from the episodes themselves: a task no census saw has blocked */
        generic ? " LEFT JOIN (SELECT task_id, count(*) AS n,"
                  "   CAST(total(max(dur_ns, 0)) AS INTEGER) AS total, max(dur_ns) AS longest"
                  "   FROM blocking WHERE task_id IS NOT NULL GROUP BY task_id) b"
                  " ON b.task_id = t.id" : "",
        o.sort) < 0) {
        free(source);
        ls_trace_close(t);
        return 1;
    }
    sqlite3_stmt *st = ls_prepare(t, sql);
    free(sql);
    if (!st) {
        free(source);
        ls_trace_close(t);
        return 1;
    }
    sqlite3_bind_int64(st, 1, start);
    sqlite3_bind_int64(st, 2, end);
    if (o.name)
        sqlite3_bind_text(st, 3, o.name, -1, SQLITE_STATIC);
    if (o.state)
        sqlite3_bind_text(st, 4, o.state, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, o.limit > 0 ? o.limit : -1);
    static const ls_col cols[] = {
        { "ID", "id", true }, { "NAME", "name", false }, { "PARENT", "parent", true },
        { "STATE", "state", false }, { "CREATED", "created_ns", true },
        { "LIFETIME", "lifetime_ns", true }, { "BUSY", "busy_ns", true },
        { "SCHED", "scheduled_ns", true }, { "IDLE", "idle_ns", true },
        { "RESUMES", "resumes", true }, { "WAKES", "wakes", true },
        { "LONGEST", "longest_step_ns", true }, { "BLOCK", "blocking", true },
        { "ERROR", "error", false },
    };
    static const ls_col gcols[] = {
        { "ID", "id", true }, { "NAME", "name", false }, { "PARENT", "parent", true },
        { "STATE", "state", false }, { "CREATED", "created_ns", true },
        { "LIFETIME", "lifetime_ns", true }, { "BUSY", "busy_ns", true },
        { "SCHED", "scheduled_ns", true }, { "IDLE", "idle_ns", true },
        { "RESUMES", "resumes", true }, { "WAKES", "wakes", true },
        { "LONGEST", "longest_step_ns", true }, { "BLOCK", "blocking", true },
        { "BLOCKED", "blocked_ns", true }, { "MAXBLOCK", "longest_blocking_ns", true },
        { "ERROR", "error", false },
    };
    ls_table *tab = generic ? ls_table_new(gcols, sizeof(gcols) / sizeof(gcols[0]))
                            : ls_table_new(cols, sizeof(cols) / sizeof(cols[0]));
    int step;
    size_t unknown = 0;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        const char *state = (const char *)sqlite3_column_text(st, 3);
        bool seen = !ls_col_null(st, 6);            /* has task_stats */
        unknown += state && !strcmp(state, "unknown");
        ls_table_int(tab, sqlite3_column_int64(st, 0));
        ls_table_str(tab, (const char *)sqlite3_column_text(st, 1));
        if (sqlite3_column_type(st, 2) == SQLITE_NULL)
            ls_table_null(tab);
        else
            ls_table_int(tab, sqlite3_column_int64(st, 2));
        ls_table_str(tab, state);
        if (sqlite3_column_int(st, 14))     /* pre-existing: created before the trace */
            ls_table_str(tab, json ? NULL : "<start");
        else
            ls_table_dur(tab, sqlite3_column_int64(st, 4));
        ls_table_dur(tab, sqlite3_column_int64(st, 5));
        for (int c = 6; c <= 12; c++) {
            if (!seen && (c != 12 || !generic))
                ls_table_null(tab);
            else if (c == 9 || c == 10 || c == 12)
                ls_table_int(tab, sqlite3_column_int64(st, c));
            else
                ls_table_dur(tab, sqlite3_column_int64(st, c));
        }
        if (generic) {
            ls_table_dur(tab, ls_col_ts(st, 16));
            ls_table_dur(tab, ls_col_ts(st, 17));
        }
        int64_t err = sqlite3_column_int64(st, 13);
        char b[32];
        if (sqlite3_column_type(st, 13) == SQLITE_NULL || err == 0)
            ls_table_str(tab, json ? NULL : "");
        else
            ls_table_str(tab, ls_fmt_err(b, sizeof(b), err));
    }
    bool ok = ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    if (ok && !json && source)
        printf("%s: states and times as the censuses saw them (a state entered and left "
               "between two censuses is not seen)\n", ls_term(source));
    if (ok)
        ls_table_print(tab, stdout, json);
    else
        ls_table_free(tab);
    if (ok && !json && unknown)
        printf("unknown: %zu task%s without lifecycle events to follow (%s)\n", unknown,
               unknown == 1 ? "" : "s", source ? "never seen by a census: named in a blocking "
                                                 "episode only"
                                               : "beyond the recorder's task table: meta "
                                                 "untracked_tasks");
    free(source);
    ls_trace_close(t);
    return ok ? 0 : 1;
}
