/*
 * cmd_tasks.c -- `loopscope tasks TRACE`: one row per task, like
 * tokio-console's task list.  The per-task numbers come from the
 * task_stats table the recorder computes when capture ends.  --stacks:
 * each listed task parked at a moment, with the await chain a census saw
 * when it parked (asyncio traces: await_stacks; stacks.h).
 */
#define _GNU_SOURCE
#include "commands.h"
#include "evl-probes.h"
#include "output.h"
#include "stacks.h"
#include "trace.h"
#include "ls_codes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: loopscope tasks TRACE [--sort KEY] [--state STATE] [--name GLOB]\n"
    "                             [--limit N] [--stacks [--at TIME]] [--json]\n"
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
    "  --stacks        then each listed task parked (suspended) at TIME, with its\n"
    "                  await chain when it parked: a line \"task N 'NAME' parked\n"
    "                  since +T on REASON OBJECT\" (OBJECT: the awaited task; a\n"
    "                  lock's address and the task holding it; else the awaited\n"
    "                  object's address), then the coroutine frames innermost\n"
    "                  first, function and file:line, '>' marking the\n"
    "                  application's own (as `blocking` tells them).  Asyncio\n"
    "                  traces only (a census records the chains): any other\n"
    "                  says in one line that it has none\n"
    "  --at TIME       with --stacks: the moment, from the recording start (e.g.\n"
    "                  1.5s or +1.5s; default: the end of the recording)\n"
    "  --json          JSON array instead of a table; with --stacks each task\n"
    "                  has parked_since_ns (from the start), parked_on {reason,\n"
    "                  address, task_id, task: the awaited task or the lock's\n"
    "                  holder} and await_chain [{function, file, line, module,\n"
    "                  application}], null when not parked at TIME (await_chain\n"
    "                  also when no chain was recorded)\n"
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
    "example: loopscope tasks trace.db --sort busy --limit 10\n"
    "         loopscope tasks trace.db --stacks --at +1.5s --name 'worker-*'\n";

struct opts {
    const char *sort, *state, *name;
    long limit;
    bool stacks;
    int64_t at;               /* --at from the start; -1: the end of the recording */
    const char *at_s;
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
    case 'k':
        o->stacks = true;
        return 0;
    case 'a':
        /* a time as the other commands take it, or as they print it (+1.5s) */
        o->at = ls_parse_duration(arg[0] == '+' ? arg + 1 : arg);
        if (o->at < 0)
            return ls_error("tasks: invalid --at '%s' (a time from the recording start, e.g. "
                            "+1.5s, 250ms)", arg);
        o->at_s = arg;
        return 0;
    }
    return 0;
}

/* ------------------------------------------------------------- --stacks */

/* What a listed task was doing at the moment --stacks looks at. */
struct parked {
    int64_t id;
    char *name;
    bool parked;              /* its last state event by then is a task_suspend */
    int64_t since;            /* that suspend's time (clamped: ls_ts) */
    int64_t since_raw;        /* as stored: await_stacks' key */
    int64_t reason, arg0, arg1;
    char *reason_name;        /* suspend_reasons.name */
    char *other;              /* the awaited task's or the lock holder's name */
    int64_t leak_ts;          /* a leak verdict after it parked (0: none) */
    char *leak_name;
    int64_t stack;            /* its await chain (stacks.id), -1: none recorded */
};

struct stacks_ctx {
    ls_trace *t;
    struct parked *p;
    size_t n, cap;
    int64_t start, at;
};

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* The task a suspend names: awaited (reason task) or holding the lock. */
static int64_t other_task(const struct parked *p)
{
    return p->reason == EVL_SUSPEND_TASK ? p->arg0 : p->reason == EVL_SUSPEND_LOCK ? p->arg1 : 0;
}

/* For each listed task: its state events up to the moment, newest first,
 * through the events table's lookup by task (model/events_vtab.c); the
 * first that is not a leak verdict tells whether it was parked. */
static bool find_parked(struct stacks_ctx *c)
{
    sqlite3_stmt *st = ls_prepare(c->t,
        "SELECT kind, reason, arg0, arg1, ts_ns,"
        "  CASE kind WHEN " LS_SQL_KIND_task_leak " THEN (SELECT name FROM leak_kinds WHERE id = reason)"
        "   ELSE (SELECT name FROM suspend_reasons WHERE id = reason) END"
        " FROM events WHERE task_id = ?1 AND ts_ns <= ?2 AND kind IN (" LS_SQL_KIND_task_run ", "
        LS_SQL_KIND_task_suspend ", " LS_SQL_KIND_task_wake ", " LS_SQL_KIND_task_finish ", "
        LS_SQL_KIND_task_leak ") ORDER BY ts_ns DESC, rowid DESC");
    sqlite3_stmt *nm = ls_prepare(c->t, "SELECT name FROM tasks WHERE id = ?1");
    sqlite3_stmt *aw = ls_await_prepare(c->t);
    bool ok = st && nm && aw;
    for (size_t i = 0; ok && i < c->n; i++) {
        struct parked *p = &c->p[i];
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, p->id);
        sqlite3_bind_int64(st, 2, c->at);
        int step;
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            int kind = sqlite3_column_int(st, 0);
            if (kind == EVL_PROBE_ID_task_leak) {
                p->leak_ts = ls_col_ts(st, 4);      /* the first verdict after it parked */
                free(p->leak_name);
                p->leak_name = dup_or_null(ls_col_text(st, 5));
                continue;
            }
            if (kind == EVL_PROBE_ID_task_suspend) {
                p->parked = true;
                p->since = ls_col_ts(st, 4);
                p->since_raw = sqlite3_column_int64(st, 4);
                p->reason = sqlite3_column_int64(st, 1);
                p->arg0 = sqlite3_column_int64(st, 2);
                p->arg1 = sqlite3_column_int64(st, 3);
                p->reason_name = dup_or_null(ls_col_text(st, 5));
            }
            break;
        }
        ok = step == SQLITE_ROW || ls_step_ok(c->t, st, step);
        if (!ok || !p->parked)
            continue;
        if (other_task(p)) {
            sqlite3_reset(nm);
            sqlite3_bind_int64(nm, 1, other_task(p));
            if (sqlite3_step(nm) == SQLITE_ROW)
                p->other = dup_or_null(ls_col_text(nm, 0));
        }
        /* the row the census wrote with that suspend */
        p->stack = ls_await_stack(aw, p->id, p->since_raw);
    }
    sqlite3_finalize(st);
    sqlite3_finalize(nm);
    sqlite3_finalize(aw);
    return ok;
}

static void stacks_free(struct stacks_ctx *c)
{
    for (size_t i = 0; i < c->n; i++) {
        free(c->p[i].name);
        free(c->p[i].reason_name);
        free(c->p[i].other);
        free(c->p[i].leak_name);
    }
    free(c->p);
}

/* "lock 0x7f3b10c4a230 held by task 3 'dl-b'", escaped for the terminal */
static void print_on(const struct parked *p)
{
    if (p->reason == EVL_SUSPEND_TASK) {
        printf("task %lld '%s'", (long long)p->arg0, p->other ? ls_term(p->other) : "?");
        return;
    }
    if (p->reason_name)
        printf("%s", ls_term(p->reason_name));
    else
        printf("reason %lld", (long long)p->reason);
    if (p->arg0)
        printf(" 0x%llx", (unsigned long long)p->arg0);
    if (p->reason == EVL_SUSPEND_LOCK && p->arg1)
        printf(" held by task %lld '%s'", (long long)p->arg1, p->other ? ls_term(p->other) : "?");
}

static void print_chains(struct stacks_ctx *c, bool at_given, int64_t rec_end)
{
    char d[32], e[32];
    size_t parked = 0;
    for (size_t i = 0; i < c->n; i++)
        parked += c->p[i].parked;
    char when[96];
    if (at_given)
        snprintf(when, sizeof(when), "+%s", ls_fmt_dur(d, sizeof(d), c->at - c->start));
    else if (rec_end >= 0)
        snprintf(when, sizeof(when), "the end of the recording (+%s)",
                 ls_fmt_dur(d, sizeof(d), rec_end - c->start));
    else
        snprintf(when, sizeof(when), "the end of the recording");
    if (!parked) {
        printf("\nno task listed was parked at %s\n", when);
        return;
    }
    printf("\n%zu task%s parked at %s; await chains when %s parked, innermost frame first "
           "('>': application frame):\n", parked, parked == 1 ? "" : "s", when,
           parked == 1 ? "it" : "each");
    for (size_t i = 0; i < c->n; i++) {
        const struct parked *p = &c->p[i];
        if (!p->parked)
            continue;
        printf("\ntask %lld '%s' parked since +%s on ", (long long)p->id,
               p->name ? ls_term(p->name) : "?", ls_fmt_dur(d, sizeof(d), p->since - c->start));
        print_on(p);
        if (p->leak_ts)
            printf("; leaked at +%s (%s)", ls_fmt_dur(e, sizeof(e), p->leak_ts - c->start),
                   p->leak_name ? ls_term(p->leak_name) : "?");
        printf("\n");
        if (p->stack >= 0)
            ls_stack_print(c->t, p->stack, NULL, NULL, true, LS_STACK_IN_ORDER);
        else
            printf("      (no await chain recorded with this suspend)\n");
    }
}

/* --json: the keys --stacks adds to task object r */
static void json_chain(size_t r, ls_json *j, void *ctx)
{
    struct stacks_ctx *c = ctx;
    const struct parked *p = r < c->n ? &c->p[r] : NULL;
    bool parked = p && p->parked;
    ls_json_key(j, "parked_since_ns");
    if (parked)
        ls_json_int(j, p->since - c->start);
    else
        ls_json_null(j);
    ls_json_key(j, "parked_on");
    if (parked) {
        int64_t other = other_task(p);
        ls_json_begin_object(j);
        ls_json_key(j, "reason"); ls_json_str(j, p->reason_name);
        ls_json_key(j, "address");
        if (p->reason != EVL_SUSPEND_TASK && p->arg0)
            ls_json_int(j, p->arg0);
        else
            ls_json_null(j);
        ls_json_key(j, "task_id");
        if (other)
            ls_json_int(j, other);
        else
            ls_json_null(j);
        ls_json_key(j, "task"); ls_json_str(j, other ? p->other : NULL);
        ls_json_end_object(j);
    } else {
        ls_json_null(j);
    }
    if (parked && p->stack >= 0) {
        ls_stack_print(c->t, p->stack, j, "await_chain", true, LS_STACK_IN_ORDER);
    } else {
        ls_json_key(j, "await_chain");
        ls_json_null(j);
    }
}

/* --stacks on a trace without await chains: one line (stderr with --json). */
static void say_no_chains(const char *why, bool json)
{
    if (json)
        fprintf(stderr, "note: tasks: no await chains: %s\n", why);
    else
        printf("no await chains: %s\n", why);
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
    if (o->stacks)
        say_no_chains(ls_await_none(t), json);
    return 0;
}

int cmd_tasks(int argc, char **argv)
{
    struct opts o = { .sort = "id", .at = -1 };
    static const struct option longopts[] = {
        { "sort", required_argument, NULL, 's' },
        { "state", required_argument, NULL, 'S' },
        { "name", required_argument, NULL, 'n' },
        { "limit", required_argument, NULL, 'l' },
        { "stacks", no_argument, NULL, 'k' },
        { "at", required_argument, NULL, 'a' },
        { 0 },
    };
    ls_optspec spec = { longopts, "", on_opt, &o };
    const char *path;
    bool json = false;
    int rc = ls_parse_common(argc, argv, usage, &path, &json, &spec, NULL);
    if (rc)
        return rc;
    if (o.at_s && !o.stacks) {
        ls_error("tasks: --at goes with --stacks (the await chains at that moment)");
        fprintf(stderr, "see 'loopscope tasks --help'\n");
        return 2;
    }
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
    /* --stacks: the moment, and the chains' source (none: one line) */
    const char *no_chains = o.stacks ? ls_await_none(t) : NULL;
    struct stacks_ctx sc = { .t = t, .start = ls_ts(start) };
    /* the end of the recording: where it was cut short, or unknown (-1:
     * still recording) */
    int64_t rec_end = ls_meta_int(t, LS_META_END_NS, INT64_MIN) != INT64_MIN
                      ? ls_meta_ts(t, LS_META_END_NS, 0)
                      : t->cut_short ? sc.start + t->cut_at_ns : -1;
    sc.at = o.at >= 0 ? sc.start + ls_ts(o.at) : rec_end >= 0 ? rec_end : LS_TS_LIMIT;
    if (o.stacks && !no_chains && o.at >= 0 && rec_end >= 0 && sc.at > rec_end) {
        char d[32];
        ls_error("tasks: --at %s is past the end of the recording (+%s)", o.at_s,
                 ls_fmt_dur(d, sizeof(d), rec_end - sc.start));
        free(source);
        ls_trace_close(t);
        return 1;
    }
    if (o.stacks && !no_chains && !ls_create_app_frames(t)) {
        free(source);
        ls_trace_close(t);
        return 1;
    }
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
        if (o.stacks && !no_chains) {
            if (!ls_grow((void **)&sc.p, &sc.cap, sc.n + 1, sizeof(*sc.p))) {
                step = SQLITE_NOMEM;
                break;
            }
            const char *name = ls_col_text(st, 1);
            sc.p[sc.n++] = (struct parked){ .id = sqlite3_column_int64(st, 0),
                                            .name = dup_or_null(name), .stack = -1 };
        }
    }
    bool ok = step == SQLITE_NOMEM ? !ls_error("tasks: out of memory") : ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    if (ok && o.stacks && !no_chains)
        ok = find_parked(&sc);
    if (ok && !json && source)
        printf("%s: states and times as the censuses saw them (a state entered and left "
               "between two censuses is not seen)\n", ls_term(source));
    if (ok && json && o.stacks && !no_chains) {
        ls_json j;
        ls_json_init(&j, stdout);
        ls_table_print_json_with(tab, &j, json_chain, &sc);
    } else if (ok) {
        ls_table_print(tab, stdout, json);
    } else {
        ls_table_free(tab);
    }
    if (ok && !json && unknown)
        printf("unknown: %zu task%s without lifecycle events to follow (%s)\n", unknown,
               unknown == 1 ? "" : "s", source ? "never seen by a census: named in a blocking "
                                                 "episode only"
                                               : "beyond the recorder's task table: meta "
                                                 "untracked_tasks");
    if (ok && o.stacks && no_chains)
        say_no_chains(no_chains, json);
    else if (ok && o.stacks && !json)
        print_chains(&sc, o.at >= 0, rec_end);
    stacks_free(&sc);
    free(source);
    ls_trace_close(t);
    return ok ? 0 : 1;
}
