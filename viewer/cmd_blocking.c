/*
 * cmd_blocking.c -- `loopscope blocking TRACE`: the episodes in which the
 * loop thread was held (a blocking call, or a step hogging the CPU), where
 * the application made the call, and the tasks each one delayed; then the
 * totals grouped by call site, task or syscall.
 */
#define _GNU_SOURCE
#include "codes.h"
#include "commands.h"
#include "output.h"
#include "stacks.h"
#include "trace.h"
#include "ls_codes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: loopscope blocking TRACE [--by site|task|syscall|process] [--min DUR] [--limit N]\n"
    "                          [--pid PID] [--json]\n"
    "\n"
    "Blocking episodes, longest first: how long the loop was held, off-CPU (a\n"
    "blocking syscall) or on-CPU (a long step), in which task, the application's\n"
    "call site (file:line), the stack (application frames first) and the tasks it\n"
    "delayed; then totals grouped by call site (default), task or syscall.\n"
    "\n"
    "  --by KEY     group totals by site, task, syscall or process (a process group's\n"
    "               trace: record -p PID,PID..., --children, --cgroup, --comm)\n"
    "  --pid PID    only that process's episodes (any command takes --pid)\n"
    "  --min DUR    only episodes at least this long (e.g. 20ms)\n"
    "  --limit N    list at most N episodes (default 10; totals cover all)\n"
    "  --json       JSON instead of text\n"
    "\n"
    "In a trace of the generic loop mode (a process not built on libevl) an\n"
    "episode names its loop thread and, when it happened in an asyncio task, the\n"
    "task; the application frames are the program's Python (or JIT-compiled)\n"
    "code, not the interpreter's.\n"
    "\n"
    "example: loopscope blocking trace.db --by task --min 5ms\n";

struct opts {
    const char *by;
    int64_t min;
    long limit;
};

static int on_opt(int c, const char *arg, void *ctx)
{
    struct opts *o = ctx;
    char *end;
    switch (c) {
    case 'b':
        if (strcmp(arg, "site") && strcmp(arg, "task") && strcmp(arg, "syscall") &&
            strcmp(arg, "process"))
            return ls_error("blocking: --by takes site, task, syscall or process, not '%s'", arg);
        o->by = arg;
        return 0;
    case 'm':
        o->min = ls_parse_duration(arg);
        if (o->min < 0)
            return ls_error("blocking: invalid duration '%s' (e.g. 10ms, 1.5s)", arg);
        return 0;
    case 'l':
        o->limit = strtol(arg, &end, 10);
        if (*end || o->limit <= 0)
            return ls_error("blocking: invalid --limit '%s'", arg);
        return 0;
    }
    return 0;
}

/* "dir/file.c:42 function" */
static char *site_text(const char *file, int line, const char *fn)
{
    char *s = NULL;
    if (file && asprintf(&s, "%s:%d %s", ls_short_path(file), line, fn ? fn : "?") < 0)
        s = NULL;
    else if (!file && asprintf(&s, "%s", fn ? fn : "(no application frame)") < 0)
        s = NULL;
    return s;
}

/* The stack of one episode: application frames first, then the rest. */
static void print_stack(ls_trace *t, int64_t stack, ls_json *j, bool generic)
{
    ls_stack_print(t, stack, j, "stack", generic, LS_STACK_APP_FIRST);
}

/* blocking_victims.cause (model/codes.h, SCHEMA.md) as --json says it */
static const char *const cause_names[LS_CAUSE_FD + 1] = {
    [0] = "?", [LS_CAUSE_READY] = "ready", [LS_CAUSE_TIMER] = "timer due",
    [LS_CAUSE_FD] = "io ready",
};

static void print_victims(ls_trace *t, int64_t id, int64_t ndelayed, ls_json *j)
{
    sqlite3_stmt *st = ls_prepare(t,
        "SELECT v.task_id, t.name, v.delay_ns, v.cause FROM blocking_victims v"
        " LEFT JOIN tasks t ON t.id = v.task_id WHERE v.blocking_id = ?"
        " ORDER BY v.delay_ns DESC, v.task_id");
    if (!st)
        return;
    sqlite3_bind_int64(st, 1, id);
    if (j) {
        ls_json_key(j, "delayed");
        ls_json_begin_array(j);
    } else if (ndelayed) {
        printf("    delayed %lld task%s:", (long long)ndelayed, ndelayed == 1 ? "" : "s");
    }
    int shown = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *name = ls_col_text(st, 1);
        int64_t delay = sqlite3_column_int64(st, 2);
        if (j) {
            ls_json_begin_object(j);
            ls_json_key(j, "task_id"); ls_json_int(j, sqlite3_column_int64(st, 0));
            ls_json_key(j, "task"); ls_json_str(j, name);
            ls_json_key(j, "delay_ns"); ls_json_int(j, delay);
            ls_json_key(j, "cause");
            int64_t cause = sqlite3_column_int64(st, 3);
            bool known = cause >= LS_CAUSE_READY && cause <= LS_CAUSE_FD;
            ls_json_str(j, cause_names[known ? cause : 0]);
            ls_json_end_object(j);
        } else if (shown++ < 8) {
            char d[32];
            int64_t cause = sqlite3_column_int64(st, 3);
            printf(" %s +%s%s%s", name ? ls_term(name) : "?", cause == LS_CAUSE_FD ? "<=" : "",
                   ls_fmt_dur(d, sizeof(d), delay),
                   cause == LS_CAUSE_TIMER ? " (timer)" : cause == LS_CAUSE_FD ? " (io)" : "");
        }
    }
    sqlite3_finalize(st);
    if (j)
        ls_json_end_array(j);
    else if (ndelayed)
        printf("%s\n", shown > 8 ? " ..." : "");
}

static const char episodes_sql[] =
    "SELECT b.id, b.task_id, t.name, b.start_ns - ?1, b.dur_ns, k.name, y.name, b.stack_id,"
    "  s.function, s.file, s.line, b.delayed_tasks, coalesce(l.tid, b.loop_id), l.pid"
    " FROM blocking b LEFT JOIN tasks t ON t.id = b.task_id LEFT JOIN loops l ON l.id = b.loop_id"
    " LEFT JOIN blocking_kinds k ON k.id = b.kind LEFT JOIN syscalls y ON y.nr = b.syscall"
    " LEFT JOIN sites s ON s.stack_id = b.stack_id"
    " WHERE b.dur_ns >= ?2 ORDER BY b.dur_ns DESC, b.id LIMIT ?3";

/* Group keys: the expression totals are grouped by. */
static const char *group_expr(const char *by, bool generic)
{
    if (!strcmp(by, "task"))
        return generic ? "coalesce(t.name, '(no asyncio task)')" : "coalesce(t.name, '(callback)')";
    if (!strcmp(by, "process"))
        return "coalesce('pid ' || l.pid, '(no loop row)')";
    if (!strcmp(by, "syscall"))
        return "coalesce(y.name, CASE b.kind WHEN " LS_SQL_BLOCK_ONCPU " THEN '(on-cpu)' ELSE '(none)' END)";
    return "CASE WHEN s.file IS NULL THEN coalesce(s.function, '(no application frame)')"
           " ELSE s.file || ':' || s.line || ' ' || coalesce(s.function, '?') END";
}

int cmd_blocking(int argc, char **argv)
{
    struct opts o = { .by = "site", .min = 0, .limit = 10 };
    static const struct option longopts[] = {
        { "by", required_argument, NULL, 'b' },
        { "min", required_argument, NULL, 'm' },
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
    if (!ls_create_app_frames(t)) {
        ls_trace_close(t);
        return 1;
    }
    int64_t start = ls_meta_int(t, LS_META_START_NS, 0);
    int64_t thr = ls_meta_int(t, LS_META_BLOCK_THRESHOLD_NS, 0);
    char *detect = ls_meta(t, LS_META_BLOCKING_DETECTION);
    bool generic = ls_is_generic(t), group = ls_trace_group(t);
    ls_json jj, *j = NULL;
    char d1[32], d2[32], d3[32];

    /* total(): sum() fails on an overflow, which forged durations make. */
    sqlite3_stmt *tot = ls_prepare(t, "SELECT count(*), CAST(total(dur_ns) AS INTEGER) FROM blocking"
                                      " WHERE dur_ns >= ?");
    if (!tot)
        goto fail;
    sqlite3_bind_int64(tot, 1, o.min);
    sqlite3_step(tot);
    int64_t n = sqlite3_column_int64(tot, 0), total = sqlite3_column_int64(tot, 1);
    sqlite3_finalize(tot);

    if (json) {
        j = &jj;
        ls_json_init(j, stdout);
        ls_json_begin_object(j);
        ls_json_key(j, "threshold_ns"); ls_json_int(j, thr);
        ls_json_key(j, "episodes_total"); ls_json_int(j, n);
        ls_json_key(j, "blocked_ns"); ls_json_int(j, total);
        ls_json_key(j, "episodes");
        ls_json_begin_array(j);
    } else if (detect && !strcmp(detect, "off")) {
        printf("blocking detection was off for this recording (record without --no-blocking)\n");
    } else {
        printf("%lld blocking episode%s of at least %s, %s in all\n", (long long)n,
               n == 1 ? "" : "s", ls_fmt_dur(d1, sizeof(d1), o.min > thr ? o.min : thr),
               ls_fmt_dur(d2, sizeof(d2), total));
    }

    sqlite3_stmt *st = ls_prepare(t, episodes_sql);
    if (!st)
        goto fail;
    sqlite3_bind_int64(st, 1, start);
    sqlite3_bind_int64(st, 2, o.min);
    sqlite3_bind_int64(st, 3, o.limit);
    int step, rank = 0;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0), dur = sqlite3_column_int64(st, 4);
        const char *task = ls_col_text(st, 2), *kind = ls_col_text(st, 5),
                   *sys = ls_col_text(st, 6);
        char *site = site_text(ls_col_text(st, 9), sqlite3_column_int(st, 10), ls_col_text(st, 8));
        int64_t stack = sqlite3_column_int64(st, 7), ndelayed = sqlite3_column_int64(st, 11);
        if (j) {
            ls_json_begin_object(j);
            ls_json_key(j, "id"); ls_json_int(j, id);
            ls_json_key(j, "task_id");
            if (sqlite3_column_type(st, 1) == SQLITE_NULL)
                ls_json_null(j);
            else
                ls_json_int(j, sqlite3_column_int64(st, 1));
            ls_json_key(j, "task"); ls_json_str(j, task);
            if (generic) {
                ls_json_key(j, "thread"); ls_json_int(j, sqlite3_column_int64(st, 12));
            }
            if (group && sqlite3_column_type(st, 13) != SQLITE_NULL) {
                ls_json_key(j, "pid"); ls_json_int(j, sqlite3_column_int64(st, 13));
            }
            ls_json_key(j, "start_ns"); ls_json_int(j, sqlite3_column_int64(st, 3));
            ls_json_key(j, "dur_ns"); ls_json_int(j, dur);
            ls_json_key(j, "kind"); ls_json_str(j, kind);
            ls_json_key(j, "syscall"); ls_json_str(j, sys);
            ls_json_key(j, "site"); ls_json_str(j, site);
            print_stack(t, stack, j, generic);
            print_victims(t, id, ndelayed, j);
            ls_json_end_object(j);
        } else if (generic) {
            char pid[40] = "";
            if (group)
                snprintf(pid, sizeof(pid), " of pid %lld", (long long)sqlite3_column_int64(st, 13));
            printf("\n#%d  %s %s%s%s on thread %lld%s%s%s, at +%s\n", ++rank,
                   ls_fmt_dur(d1, sizeof(d1), dur), kind ? ls_term(kind) : "?", sys ? " in " : "",
                   sys ? ls_term(sys) : "", (long long)sqlite3_column_int64(st, 12), pid,
                   task ? ", in asyncio task " : "", task ? ls_term(task) : "",
                   ls_fmt_dur(d3, sizeof(d3), sqlite3_column_int64(st, 3)));
            printf("    called from %s\n", site ? ls_term(site) : "?");
            print_stack(t, stack, NULL, generic);
            print_victims(t, id, ndelayed, NULL);
        } else {
            printf("\n#%d  %s %s%s%s in %s (task id %lld), at +%s\n", ++rank,
                   ls_fmt_dur(d1, sizeof(d1), dur), kind ? ls_term(kind) : "?", sys ? " in " : "",
                   sys ? ls_term(sys) : "", task ? ls_term(task) : "a callback",
                   (long long)sqlite3_column_int64(st, 1),
                   ls_fmt_dur(d3, sizeof(d3), sqlite3_column_int64(st, 3)));
            printf("    called from %s\n", site ? ls_term(site) : "?");
            print_stack(t, stack, NULL, generic);
            print_victims(t, id, ndelayed, NULL);
        }
        free(site);
    }
    bool ok = ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    if (!ok)
        goto fail;

    /* Totals over all episodes (not only the listed ones). */
    char *sql = NULL;
    if (asprintf(&sql,
        "SELECT %s AS k, count(*), CAST(total(b.dur_ns) AS INTEGER), max(b.dur_ns),"
        "  group_concat(DISTINCT coalesce(y.name, k.name)), CAST(total(b.delayed_tasks) AS INTEGER)"
        " FROM blocking b LEFT JOIN tasks t ON t.id = b.task_id"
        " LEFT JOIN blocking_kinds k ON k.id = b.kind LEFT JOIN syscalls y ON y.nr = b.syscall"
        " LEFT JOIN sites s ON s.stack_id = b.stack_id LEFT JOIN loops l ON l.id = b.loop_id"
        " WHERE b.dur_ns >= ?1 GROUP BY k ORDER BY total(b.dur_ns) DESC, k", group_expr(o.by, generic)) < 0)
        goto fail;
    st = ls_prepare(t, sql);
    free(sql);
    if (!st)
        goto fail;
    sqlite3_bind_int64(st, 1, o.min);
    static const ls_col cols[] = {
        { "KEY", "key", false }, { "EPISODES", "episodes", true }, { "TOTAL", "total_ns", true },
        { "MAX", "max_ns", true }, { "DELAYED", "delayed_tasks", true }, { "IN", "calls", false },
    };
    ls_table *tab = ls_table_new(cols, sizeof(cols) / sizeof(cols[0]));
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        const char *key = ls_col_text(st, 0);
        ls_table_str(tab, !strcmp(o.by, "site") && key && key[0] == '/' ? ls_short_path(key) : key);
        ls_table_int(tab, sqlite3_column_int64(st, 1));
        ls_table_dur(tab, sqlite3_column_int64(st, 2));
        ls_table_dur(tab, sqlite3_column_int64(st, 3));
        ls_table_int(tab, sqlite3_column_int64(st, 5));
        ls_table_str(tab, ls_col_text(st, 4));
    }
    ok = ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    if (j) {
        ls_json_end_array(j);
        ls_json_key(j, "by"); ls_json_str(j, o.by);
        ls_json_key(j, "groups");
        ls_table_print_json(tab, j);
        ls_json_end_object(j);
    } else if (n) {
        printf("\nby %s:\n", o.by);
        ls_table_print(tab, stdout, false);
    } else {
        ls_table_free(tab);
    }
    free(detect);
    ls_trace_close(t);
    return ok ? 0 : 1;
fail:
    free(detect);
    ls_trace_close(t);
    return 1;
}
