/*
 * cmd_lint.c -- `loopscope lint TRACE`: warnings with evidence, one per
 * line, for the mistakes event-loop code makes: blocking steps, tasks that
 * never yield, leaked tasks, lost wakeups, unretrieved errors, self-waking
 * tasks, late timers, lossy traces.  The rules and their exact definitions
 * are in the usage text (`loopscope lint --help`); each has a stable id.
 * This file is the command, the warning writer and the rules that need no
 * task lifecycle (blocking-step, loop-lag, lossy-trace); the others are in
 * lint_tasks.c.  Depends on lint.h, loopstat.h and ls_codes.h; schema:
 * tracer/SCHEMA.md.
 */
#define _GNU_SOURCE
#include "codes.h"
#include "commands.h"
#include "lint.h"
#include "loopstat.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: loopscope lint TRACE [--strict] [--late DUR] [--json]\n"
    "\n"
    "Warnings with evidence, one per line: warning[RULE] WHAT (+TIME), where\n"
    "TIME is from the recording start; then a summary line.  THRESHOLD is the\n"
    "recording's blocking threshold (meta block_threshold_ns; 10ms if unset).\n"
    "\n"
    "rules:\n"
    "  blocking-step      a blocking episode (the blocking table): the loop was\n"
    "                     held at least THRESHOLD by a blocking call (off-cpu) or\n"
    "                     a long computation (on-cpu); one warning per episode,\n"
    "                     with the application's call site\n"
    "  loop-lag           a loop thread of a generic loop mode trace whose\n"
    "                     iterations (a wait call's return to the next wait: the\n"
    "                     loop does not listen meanwhile) lasted at least\n"
    "                     THRESHOLD: its longest (loop_windows max_busy_ns), or\n"
    "                     its p99 when the power-of-two bucket holding it starts\n"
    "                     at THRESHOLD or above (iteration_hist); one per thread\n"
    "  never-yields       a task whose longest step (task_run to its next suspend\n"
    "                     or finish) lasted at least THRESHOLD, or at least\n"
    "                     max(1ms, THRESHOLD/10) and half of its lifetime; one per\n"
    "                     task, at its longest step\n"
    "  leaked-task        a leak verdict (task_leak events) of libevl, or of a\n"
    "                     census of asyncio tasks: pending_at_close (still\n"
    "                     pending when its loop closed) or abandoned (awaits a\n"
    "                     future nothing can complete; asyncio: freed while\n"
    "                     pending)\n"
    "  lost-wakeup        an unfinished task whose last lifecycle event shows a\n"
    "                     wakeup that never took effect, while its loop went on\n"
    "                     for at least THRESHOLD (until it stopped or the\n"
    "                     recording ended): (a) it was woken (task_wake) but never\n"
    "                     ran again; (b) it awaits a task that finished, but was\n"
    "                     never woken; (c) it was cancelled while suspended, but\n"
    "                     never woken\n"
    "  unretrieved-error  a task whose error nobody read: libevl's unretrieved\n"
    "                     leak verdict, or a failed task that no task awaited (no\n"
    "                     task_suspend with reason task on it, and no gather of\n"
    "                     its parent while it was alive).  An await on a task that\n"
    "                     had already finished does not suspend, so the second\n"
    "                     case may be a false alarm: check the code\n"
    "  self-wake          a task woken with itself as the waker (task_wake arg0 =\n"
    "                     its own id), other than by a yield; one per task\n"
    "  late-timer         a sleep whose timer fired more than DUR after its\n"
    "                     deadline (the timer_lateness view); one per task,\n"
    "                     with the count and the worst\n"
    "  deadlock           a wait-for cycle: tasks each suspended waiting for the\n"
    "                     next, by awaiting it or waiting for a lock it holds\n"
    "                     (evl_lock, asyncio.Lock: the suspend's arg1 names the\n"
    "                     holder), so none can go on unless something outside\n"
    "                     the cycle cancels one; one per cycle, naming each task,\n"
    "                     its function and the lock, from when it formed, and\n"
    "                     whether it lasted to the end of the recording; on an\n"
    "                     asyncio trace each member's await chain when it joined\n"
    "                     the cycle follows, one indented line each: its\n"
    "                     innermost frame and innermost application frame\n"
    "                     (`tasks --stacks --at TIME` shows the whole chain;\n"
    "                     --json: evidence await_chains)\n"
    "  lossy-trace        the recording lost ring-buffer messages (meta\n"
    "                     dropped_messages; dropped_events_claimed is what the\n"
    "                     target says was in them), rejected malformed records\n"
    "                     or could not read batches, or (an older trace) the\n"
    "                     target claims dropped events: other rules may miss or\n"
    "                     misreport\n"
    "\n"
    "A generic loop mode trace (a process not built on libevl) has a task\n"
    "lifecycle when its asyncio tasks were read by a census every few ms (meta\n"
    "task_source 'census ...'): then every rule runs on what the censuses saw,\n"
    "at their times (a step shorter than a census is not seen; no waker is\n"
    "known, so self-wake and late-timer do not fire); without one, only\n"
    "blocking-step, loop-lag and lossy-trace apply to it.\n"
    "\n"
    "  --late DUR   late-timer threshold (default: THRESHOLD, or 5ms if unset); at\n"
    "               least 1ms, or THRESHOLD if lower: the trace keeps no timer\n"
    "               that fired less late than that\n"
    "  --strict     exit 1 when any warning fires (for CI)\n"
    "  --json       a JSON array of {rule, task_id, task, message, evidence}\n"
    "\n"
    "example: loopscope lint trace.db --strict --late 2ms\n";

struct opts {
    bool strict;
    int64_t late;              /* -1: default */
};

static int on_opt(int c, const char *arg, void *ctx)
{
    struct opts *o = ctx;
    switch (c) {
    case 's':
        o->strict = true;
        return 0;
    case 'l':
        o->late = ls_parse_duration(arg);
        if (o->late < 0)
            return ls_error("lint: invalid --late '%s' (e.g. 5ms, 1.5s)", arg);
        return 0;
    }
    return 0;
}
static const char *const rule_ids[R_COUNT] = {
    "blocking-step", "loop-lag", "never-yields", "leaked-task", "lost-wakeup", "unretrieved-error",
    "self-wake", "late-timer", "deadlock", "lossy-trace",
};

/* -------------------------------------------------------------- output */

void lint_warn_begin(lint *L, int rule, int64_t task_id, const char *task, const char *fmt, ...)
{
    char *msg = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&msg, fmt, ap) < 0)
        msg = NULL;
    va_end(ap);
    L->counts[rule]++;
    L->total++;
    if (!L->j) {
        /* names from the trace: escaped */
        printf("warning[%s] %s\n", rule_ids[rule], msg ? ls_term(msg) : "?");
    } else {
        ls_json_begin_object(L->j);
        ls_json_key(L->j, "rule"); ls_json_str(L->j, rule_ids[rule]);
        ls_json_key(L->j, "task_id");
        if (task_id < 0)
            ls_json_null(L->j);
        else
            ls_json_int(L->j, task_id);
        ls_json_key(L->j, "task"); ls_json_str(L->j, task_id < 0 ? NULL : task);
        ls_json_key(L->j, "message"); ls_json_str(L->j, msg);
        ls_json_key(L->j, "evidence");
        ls_json_begin_object(L->j);
    }
    free(msg);
}

void lint_ev_int(lint *L, const char *k, int64_t v)
{
    if (L->j) {
        ls_json_key(L->j, k);
        ls_json_int(L->j, v);
    }
}

void lint_ev_str(lint *L, const char *k, const char *v)
{
    if (L->j) {
        ls_json_key(L->j, k);
        ls_json_str(L->j, v);
    }
}

void lint_warn_end(lint *L)
{
    if (L->j) {
        ls_json_end_object(L->j);
        ls_json_end_object(L->j);
    }
}

/* ------------------------------------------------------------- helpers */

const char *lint_dur(int64_t ns)
{
    static char bufs[8][32];
    static int n;
    char *b = bufs[n++ % 8];
    return ls_fmt_dur(b, sizeof(bufs[0]), ns);
}

const char *lint_at(lint *L, int64_t ns)
{
    static char bufs[8][40];
    static int n;
    char *b = bufs[n++ % 8];
    char d[32];
    snprintf(b, sizeof(bufs[0]), "+%s",
             ls_fmt_dur(d, sizeof(d), ns - L->start < 0 ? 0 : ns - L->start));
    return b;
}

/* "file.c:42 fn" with GCC's clone suffixes (.constprop.0, .isra.0, .part.1,
 * .cold) dropped from fn: the user wrote spin_ms, not spin_ms.constprop.0. */
char *lint_site_text(const char *file, int line, const char *fn)
{
    char *clean = fn ? strdup(fn) : NULL, *s = NULL;
    if (clean && clean[0] != '.') {
        char *dot = strchr(clean, '.');
        if (dot)
            *dot = 0;
    }
    if (file) {
        if (asprintf(&s, "%s:%d %s", ls_short_path(file), line, clean ? clean : "?") < 0)
            s = NULL;
    } else if (clean) {
        s = strdup(clean);
    }
    free(clean);
    return s;
}

bool lint_run_rows(lint *L, sqlite3_stmt *st, void (*row)(lint *L, sqlite3_stmt *st))
{
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        row(L, st);
    bool ok = ls_step_ok(L->t, st, rc);
    sqlite3_finalize(st);
    return ok;
}

sqlite3_stmt *lint_prep(lint *L, const char *sql)
{
    sqlite3_stmt *st = ls_prepare(L->t, sql);
    if (!st)
        return NULL;
    int n = sqlite3_bind_parameter_count(st);
    int64_t v[] = { L->start, L->end, L->thr, L->late };
    for (int i = 1; i <= n && i <= 4; i++)
        sqlite3_bind_int64(st, i, v[i - 1]);
    return st;
}


/* -------------------------------------------------------- blocking-step */

static const char blocking_sql[] =
    "SELECT b.id, b.task_id, t.name, b.start_ns, b.dur_ns, b.kind, y.name, s.file, s.line,"
    "  s.function, b.delayed_tasks, b.loop_id"
    " FROM blocking b LEFT JOIN tasks t ON t.id = b.task_id"
    " LEFT JOIN syscalls y ON y.nr = b.syscall LEFT JOIN sites s ON s.stack_id = b.stack_id"
    " ORDER BY b.start_ns, b.id";

static void blocking_row(lint *L, sqlite3_stmt *st)
{
    int64_t id = sqlite3_column_int64(st, 0);
    int64_t task = ls_col_null(st, 1) ? -1 : sqlite3_column_int64(st, 1);
    int64_t ts = ls_col_ts(st, 3), d = ls_col_ts(st, 4);
    int64_t delayed = sqlite3_column_int64(st, 10);
    const char *name = ls_col_text(st, 2), *sys = ls_col_text(st, 6);
    bool oncpu = sqlite3_column_int(st, 5) == LS_BLOCK_ONCPU;
    char *site = lint_site_text(ls_col_text(st, 7), sqlite3_column_int(st, 8), ls_col_text(st, 9));
    char who[300], delay[64] = "";
    if (L->generic && !ls_col_null(st, 1) && L->lifecycle)   /* ids name census rows */
        snprintf(who, sizeof(who), "asyncio task '%s' (id %lld) on thread %lld",
                 lint_task_or(name), (long long)task, (long long)sqlite3_column_int64(st, 11));
    else if (L->generic && !ls_col_null(st, 1))
        snprintf(who, sizeof(who), "asyncio task '%s' on thread %lld", lint_task_or(name),
                 (long long)sqlite3_column_int64(st, 11));
    else if (L->generic)
        snprintf(who, sizeof(who), "thread %lld",
                 (long long)sqlite3_column_int64(st, 11));
    else if (task >= 0)
        snprintf(who, sizeof(who), "task '%s' (id %lld)", lint_task_or(name), (long long)task);
    else
        snprintf(who, sizeof(who), "a callback");
    if (delayed)
        snprintf(delay, sizeof(delay), ", delaying %lld task%s", (long long)delayed,
                 delayed == 1 ? "" : "s");
    lint_warn_begin(L, R_BLOCKING, task, name, "%s held the loop %s %s%s%s at %s (%s)%s", who,
               lint_dur(d), oncpu ? "on-cpu" : "off-cpu", sys ? " in " : "", sys ? sys : "",
               site ? site : "(no application frame)", lint_at(L, ts), delay);
    lint_ev_int(L, "episode", id);
    lint_ev_str(L, "kind", oncpu ? "on-cpu" : "off-cpu");
    lint_ev_str(L, "syscall", sys);
    lint_ev_str(L, "site", site);
    lint_ev_int(L, "start_ns", ts - L->start);
    lint_ev_int(L, "dur_ns", d);
    lint_ev_int(L, "delayed_tasks", delayed);
    lint_warn_end(L);
    free(site);
}

/* ------------------------------------------------------------- loop-lag */

static void loop_lag(lint *L, const ls_loopstat *l)
{
    int64_t lo = 0, hi = 0, slow = 0, slow_from = -1;
    bool capped = false, p99 = ls_hist_quantile(l, 0.99, &lo, &hi, &capped);
    for (int i = 0; i < l->nhist; i++)
        if (l->hist[i].lo >= L->thr && l->hist[i].count > 0) {
            slow = ls_sat_add(slow, l->hist[i].count);
            if (slow_from < 0)
                slow_from = l->hist[i].lo;
        }
    bool by_max = l->windows > 0 && l->max_busy_ns >= L->thr, by_p99 = p99 && lo >= L->thr;
    if (!by_max && !by_p99)
        return;
    char p[96] = "", n[128] = "";
    if (p99)
        snprintf(p, sizeof(p), "; p99 %s %s", capped ? "<=" : "<", lint_dur(hi));
    if (slow)
        snprintf(n, sizeof(n), "; %lld iteration%s of %s or more", (long long)slow,
                 slow == 1 ? "" : "s", lint_dur(slow_from));
    if (by_max)
        lint_warn_begin(L, R_LOOP_LAG, -1, NULL, "loop thread %lld lagged: an iteration kept it "
                   "from its wait call for %s (in the window at %s)%s%s", (long long)l->tid,
                   lint_dur(l->max_busy_ns), lint_at(L, l->max_at_ns), p, n);
    else
        lint_warn_begin(L, R_LOOP_LAG, -1, NULL, "loop thread %lld lagged: 1%% of its iterations "
                   "kept it from its wait call for %s or more%s", (long long)l->tid, lint_dur(lo),
                   n);
    lint_ev_int(L, "thread", l->tid);
    lint_ev_int(L, "iterations", l->hist_count > l->iterations ? l->hist_count : l->iterations);
    if (l->windows) {
        lint_ev_int(L, "max_busy_ns", l->max_busy_ns);
        lint_ev_int(L, "max_window_start_ns", l->max_at_ns - L->start);
    }
    if (p99) {
        lint_ev_int(L, "p99_lo_ns", lo);
        lint_ev_int(L, "p99_hi_ns", hi);
    }
    if (l->hist_count > 0)
        lint_ev_int(L, "slow_iterations", slow);
    lint_ev_int(L, "threshold_ns", L->thr);
    lint_warn_end(L);
}

static bool loop_lag_all(lint *L)
{
    ls_loopstat *ls;
    size_t n;
    if (!ls_loopstats_read(L->t, &ls, &n))
        return false;
    for (size_t i = 0; i < n; i++)
        loop_lag(L, &ls[i]);
    ls_loopstats_free(ls, n);
    return true;
}

/* ---------------------------------------------------------- lossy-trace */

static void lossy(lint *L)
{
    ls_drops d;
    ls_read_drops(L->t, &d);
    if (!ls_drops_lossy(&d))
        return;
    char what[1024] = "", part[128];   /* 7 parts at most */
    const char *sep = "";
    if (d.messages > 0) {
        char extra[96] = "";
        if (d.bytes >= 0 && d.claimed >= 0)
            snprintf(extra, sizeof(extra), " (%.0f KiB; the target claims %lld events in them)",
                     (double)d.bytes / 1024, (long long)d.claimed);
        else if (d.bytes >= 0)
            snprintf(extra, sizeof(extra), " (%.0f KiB)", (double)d.bytes / 1024);
        else if (d.claimed >= 0)
            snprintf(extra, sizeof(extra), " (the target claims %lld events in them)",
                     (long long)d.claimed);
        snprintf(part, sizeof(part), "%lld ring-buffer message%s lost%s", (long long)d.messages,
                 d.messages == 1 ? "" : "s", extra);
        strcat(what, part);
        sep = ", ";
    } else if (d.claimed > 0) {
        snprintf(part, sizeof(part), "the target claims %lld events lost (unverified)",
                 (long long)d.claimed);
        strcat(what, part);
        sep = ", ";
    }
    if (d.rejected > 0) {
        snprintf(part, sizeof(part), "%s%lld malformed record%s rejected", sep,
                 (long long)d.rejected, d.rejected == 1 ? "" : "s");
        strcat(what, part);
        sep = ", ";
    }
    if (d.read_errors > 0) {
        snprintf(part, sizeof(part), "%s%lld unreadable batch%s", sep, (long long)d.read_errors,
                 d.read_errors == 1 ? "" : "es");
        strcat(what, part);
        sep = ", ";
    }
    if (d.lost_episodes > 0) {
        snprintf(part, sizeof(part), "%s%lld blocking episode%s not kept (too many loop threads "
                 "blocked at once)", sep, (long long)d.lost_episodes,
                 d.lost_episodes == 1 ? "" : "s");
        strcat(what, part);
        sep = ", ";
    }
    if (d.loop_lost > 0) {
        snprintf(part, sizeof(part), "%sthe target's loops dropped %lld record%s while the "
                 "recorder held their buffers", sep, (long long)d.loop_lost,
                 d.loop_lost == 1 ? "" : "s");
        strcat(what, part);
    }
    lint_warn_begin(L, R_LOSSY, -1, NULL, "the recording lost data: %s; other warnings may be "
               "missing or wrong%s", what,
               d.messages > 0 ? " (record with a larger --ringbuf-kb)" : "");
    static const char *const keys[] = { "dropped_messages", "dropped_bytes", "rejected_records",
                                        "read_errors", "dropped_events_claimed", "lost_episodes",
                                        "loop_lost_records_claimed" };
    int64_t vals[] = { d.messages, d.bytes, d.rejected, d.read_errors, d.claimed,
                       d.lost_episodes, d.loop_lost };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (vals[i] >= 0)
            lint_ev_int(L, keys[i], vals[i]);
    lint_warn_end(L);
}

int cmd_lint(int argc, char **argv)
{
    struct opts o = { .late = -1 };
    static const struct option longopts[] = {
        { "strict", no_argument, NULL, 's' },
        { "late", required_argument, NULL, 'l' },
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
    /* One sequential pass reads the events: a small page cache and no mmap
     * (every page of a mapped file it touches would count as its memory). */
    sqlite3_exec(t->db, "PRAGMA cache_size = -8192; PRAGMA temp_store = MEMORY", NULL, NULL,
                 NULL);
    lint L = { .t = t };
    L.start = ls_meta_ts(t, LS_META_START_NS, 0);
    L.end = ls_meta_ts(t, LS_META_END_NS, L.start);
    L.thr = ls_meta_ts(t, LS_META_BLOCK_THRESHOLD_NS, 0);
    if (L.thr <= 0)
        L.thr = 10000000;
    L.generic = ls_is_generic(t);
    L.lifecycle = ls_has_lifecycle(t);
    L.late = o.late >= 0 ? ls_ts(o.late)
             : ls_meta_int(t, LS_META_BLOCK_THRESHOLD_NS, 0) > 0 ? L.thr : 5000000;
    bool ok = ls_create_app_frames(t);
    ls_json jj;
    if (ok && json) {
        L.j = &jj;
        ls_json_init(L.j, stdout);
        ls_json_begin_array(L.j);
    }
    /* A trace without a lifecycle (generic, no census): blocking-step and
     * loop-lag only. */
    sqlite3_stmt *st = ok ? lint_prep(&L, blocking_sql) : NULL;
    ok = st && lint_run_rows(&L, st, blocking_row) && loop_lag_all(&L) &&
         (!L.lifecycle || (lint_task_rules(&L) && lint_deadlock(&L)));
    if (ok)
        lossy(&L);
    if (L.j) {
        ls_json_end_array(L.j);
    } else if (ok) {
        if (!L.total) {
            printf("no warnings%s\n", !L.lifecycle ? " (generic loop mode: the task lifecycle "
                                                    "rules do not apply)" : "");
        } else {
            printf("%ld warning%s (", L.total, L.total == 1 ? "" : "s");
            const char *sep = "";
            for (int r = 0; r < R_COUNT; r++)
                if (L.counts[r]) {
                    printf("%s%s %ld", sep, rule_ids[r], L.counts[r]);
                    sep = ", ";
                }
            printf(")\n");
        }
    }
    ls_trace_close(t);
    if (!ok)
        return 1;
    return o.strict && L.total ? 1 : 0;
}
