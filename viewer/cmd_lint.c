/*
 * cmd_lint.c -- `loopscope lint TRACE`: warnings with evidence, one per
 * line, for the mistakes event-loop code makes: blocking steps, tasks that
 * never yield, leaked tasks, lost wakeups, unretrieved errors, self-waking
 * tasks, late timers, lossy traces.  The rules and their exact definitions
 * are in the usage text (`loopscope lint --help`); each has a stable id.
 *
 * SQL-driven: each rule is one query, ordered so the output is stable
 * (rules in table order, then by time or id).  The events table is scanned
 * once, into a small temporary table of the rare events the rules look at
 * (cancels, leaks, awaits on tasks, gathers, self-wakes), indexed; late
 * timers and never-yields steps are one window pass each; everything else
 * is index lookups on tasks, task_stats and events(task_id, ts_ns), at most
 * a few per task.  Every rule must stay near-linear on a forged trace (a
 * lookup per event that scans the task's other events is quadratic).
 * Times are clamped when read (ls_col_ts).  Schema: tracer/SCHEMA.md.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "loopstat.h"
#include "output.h"
#include "trace.h"

#include <math.h>
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
    "  leaked-task        a leak verdict of libevl (task_leak events):\n"
    "                     pending_at_close (still pending when its loop closed)\n"
    "                     or abandoned (awaits a future nothing can complete)\n"
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
    "  lossy-trace        the recording lost ring-buffer messages (meta\n"
    "                     dropped_messages; dropped_events_claimed is what the\n"
    "                     target says was in them), rejected malformed records\n"
    "                     or could not read batches, or (an older trace) the\n"
    "                     target claims dropped events: other rules may miss or\n"
    "                     misreport\n"
    "\n"
    "A generic loop mode trace (a process not built on libevl) has no task\n"
    "lifecycle: only blocking-step, loop-lag and lossy-trace apply to it.\n"
    "\n"
    "  --late DUR   late-timer threshold (default: THRESHOLD, or 5ms if unset)\n"
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

/* The rules, in output order; the index is the counter slot. */
enum { R_BLOCKING, R_LOOP_LAG, R_NEVER_YIELDS, R_LEAKED, R_LOST_WAKEUP, R_UNRETRIEVED,
       R_SELF_WAKE, R_LATE_TIMER, R_LOSSY, R_COUNT };
static const char *const rule_ids[R_COUNT] = {
    "blocking-step", "loop-lag", "never-yields", "leaked-task", "lost-wakeup", "unretrieved-error",
    "self-wake", "late-timer", "lossy-trace",
};

typedef struct lint {
    ls_trace *t;
    ls_json *j;                /* NULL: text */
    int64_t start, end, thr, late;
    bool generic;              /* generic loop mode: no task lifecycle */
    long counts[R_COUNT];
    long total;
} lint;

/* -------------------------------------------------------------- output */

/* Start a warning: text line, or a JSON object with its "evidence" object
 * left open for ev_* (warn_end closes it).  task_id < 0: no task. */
static void warn_begin(lint *L, int rule, int64_t task_id, const char *task, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void warn_begin(lint *L, int rule, int64_t task_id, const char *task, const char *fmt, ...)
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
        printf("warning[%s] %s\n", rule_ids[rule], msg ? ls_term(msg) : "?");   /* names from the trace */
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

static void ev_int(lint *L, const char *k, int64_t v)
{
    if (L->j) {
        ls_json_key(L->j, k);
        ls_json_int(L->j, v);
    }
}

static void ev_str(lint *L, const char *k, const char *v)
{
    if (L->j) {
        ls_json_key(L->j, k);
        ls_json_str(L->j, v);
    }
}

static void warn_end(lint *L)
{
    if (L->j) {
        ls_json_end_object(L->j);
        ls_json_end_object(L->j);
    }
}

/* ------------------------------------------------------------- helpers */

static const char *col_text(sqlite3_stmt *st, int i)
{
    return (const char *)sqlite3_column_text(st, i);
}

static bool col_null(sqlite3_stmt *st, int i) { return sqlite3_column_type(st, i) == SQLITE_NULL; }

/* Durations for messages; a few buffers so one printf can use several. */
static const char *dur(int64_t ns)
{
    static char bufs[8][32];
    static int n;
    char *b = bufs[n++ % 8];
    return ls_fmt_dur(b, sizeof(bufs[0]), ns);
}

/* "+1.23s": a time from the recording start. */
static const char *at(lint *L, int64_t ns)
{
    static char bufs[8][40];
    static int n;
    char *b = bufs[n++ % 8];
    char d[32];
    snprintf(b, sizeof(bufs[0]), "+%s", ls_fmt_dur(d, sizeof(d), ns - L->start < 0 ? 0 : ns - L->start));
    return b;
}

/* "file.c:42 fn" with GCC's clone suffixes (.constprop.0, .isra.0, .part.1,
 * .cold) dropped from fn: the user wrote spin_ms, not spin_ms.constprop.0. */
static char *site_text(const char *file, int line, const char *fn)
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

static bool run_rows(lint *L, sqlite3_stmt *st, void (*row)(lint *L, sqlite3_stmt *st))
{
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        row(L, st);
    bool ok = ls_step_ok(L->t, st, rc);
    sqlite3_finalize(st);
    return ok;
}

/* Prepare sql and bind ?1 start, ?2 end, ?3 threshold, ?4 late. */
static sqlite3_stmt *prep(lint *L, const char *sql)
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

static const char *task_or(const char *name) { return name ? name : "?"; }

/* -------------------------------------------------------- blocking-step */

static const char blocking_sql[] =
    "SELECT b.id, b.task_id, t.name, b.start_ns, b.dur_ns, b.kind, y.name, s.file, s.line,"
    "  s.function, b.delayed_tasks, b.loop_id"
    " FROM blocking b LEFT JOIN tasks t ON t.id = b.task_id"
    " LEFT JOIN syscalls y ON y.nr = b.syscall LEFT JOIN sites s ON s.stack_id = b.stack_id"
    " ORDER BY b.start_ns, b.id";

static void blocking_row(lint *L, sqlite3_stmt *st)
{
    int64_t id = sqlite3_column_int64(st, 0), task = col_null(st, 1) ? -1 : sqlite3_column_int64(st, 1);
    int64_t ts = ls_col_ts(st, 3), d = ls_col_ts(st, 4);
    int64_t delayed = sqlite3_column_int64(st, 10);
    const char *name = col_text(st, 2), *sys = col_text(st, 6);
    bool oncpu = sqlite3_column_int(st, 5) == 2;
    char *site = site_text(col_text(st, 7), sqlite3_column_int(st, 8), col_text(st, 9));
    char who[300], delay[64] = "";
    if (L->generic && !col_null(st, 1))
        snprintf(who, sizeof(who), "asyncio task '%s' on thread %lld", task_or(name),
                 (long long)sqlite3_column_int64(st, 11));
    else if (L->generic)
        snprintf(who, sizeof(who), "thread %lld",
                 (long long)sqlite3_column_int64(st, 11));
    else if (task >= 0)
        snprintf(who, sizeof(who), "task '%s' (id %lld)", task_or(name), (long long)task);
    else
        snprintf(who, sizeof(who), "a callback");
    if (delayed)
        snprintf(delay, sizeof(delay), ", delaying %lld task%s", (long long)delayed,
                 delayed == 1 ? "" : "s");
    warn_begin(L, R_BLOCKING, task, name, "%s held the loop %s %s%s%s at %s (%s)%s", who, dur(d),
               oncpu ? "on-cpu" : "off-cpu", sys ? " in " : "", sys ? sys : "",
               site ? site : "(no application frame)", at(L, ts), delay);
    ev_int(L, "episode", id);
    ev_str(L, "kind", oncpu ? "on-cpu" : "off-cpu");
    ev_str(L, "syscall", sys);
    ev_str(L, "site", site);
    ev_int(L, "start_ns", ts - L->start);
    ev_int(L, "dur_ns", d);
    ev_int(L, "delayed_tasks", delayed);
    warn_end(L);
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
        snprintf(p, sizeof(p), "; p99 %s %s", capped ? "<=" : "<", dur(hi));
    if (slow)
        snprintf(n, sizeof(n), "; %lld iteration%s of %s or more", (long long)slow,
                 slow == 1 ? "" : "s", dur(slow_from));
    if (by_max)
        warn_begin(L, R_LOOP_LAG, -1, NULL, "loop thread %lld lagged: an iteration kept it from "
                   "its wait call for %s (in the window at %s)%s%s", (long long)l->tid,
                   dur(l->max_busy_ns), at(L, l->max_at_ns), p, n);
    else
        warn_begin(L, R_LOOP_LAG, -1, NULL, "loop thread %lld lagged: 1%% of its iterations "
                   "kept it from its wait call for %s or more%s", (long long)l->tid, dur(lo), n);
    ev_int(L, "thread", l->tid);
    ev_int(L, "iterations", l->hist_count > l->iterations ? l->hist_count : l->iterations);
    if (l->windows) {
        ev_int(L, "max_busy_ns", l->max_busy_ns);
        ev_int(L, "max_window_start_ns", l->max_at_ns - L->start);
    }
    if (p99) {
        ev_int(L, "p99_lo_ns", lo);
        ev_int(L, "p99_hi_ns", hi);
    }
    if (l->hist_count > 0)
        ev_int(L, "slow_iterations", slow);
    ev_int(L, "threshold_ns", L->thr);
    warn_end(L);
}

static bool loop_lag_all(lint *L)
{
    ls_loopstat *ls;
    size_t n;
    if (!ls_loopstats_read(L->t, &ls, &n)) {
        ls_loopstats_free(ls, n);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        loop_lag(L, &ls[i]);
    ls_loopstats_free(ls, n);
    return true;
}

/* --------------------------------------------------------- never-yields */

/* Candidates from task_stats, then each one's longest step from its
 * task_run events: a step ends at the first suspend or finish at or after
 * it, found by a running min() over the task's events in reverse time
 * order (one sort; a lookup per step would scan ahead of every step, and a
 * trace of runs without suspends makes that quadratic).  Off-CPU time in
 * the step from lint_blk (blocking has no index on task_id). */
static const char never_sql[] =
    "WITH c AS (SELECT t.id, t.name, t.function, s.longest_step_ns AS step, s.resumes,"
    "    coalesce(t.ended_ns, ?2) - t.created_ns AS life"
    "  FROM tasks t JOIN task_stats s ON s.task_id = t.id"
    "  WHERE s.longest_step_ns >= ?3 OR (s.longest_step_ns >= max(1000000, ?3 / 10)"
    "    AND 2 * s.longest_step_ns >= coalesce(t.ended_ns, ?2) - t.created_ns)),"
    " ev AS (SELECT task_id, ts_ns, kind, min(CASE WHEN kind IN (5, 7) THEN ts_ns END)"
    "    OVER (PARTITION BY task_id ORDER BY ts_ns DESC) AS nxt"   /* RANGE: ts >= this one's */
    "    FROM events WHERE task_id IN (SELECT id FROM c) AND kind IN (4, 5, 7)),"
    " steps AS (SELECT task_id AS id, ts_ns AS ts, coalesce(nxt, ?2) - ts_ns AS len"
    "    FROM ev WHERE kind = 4),"
    " best AS (SELECT id, ts, max(len) AS len FROM steps GROUP BY id)" /* ts: of the max row */
    " SELECT c.id, c.name, c.function, c.step, c.resumes, c.life, b.ts, b.len,"
    "  (SELECT CAST(total(k.dur_ns) AS INTEGER) FROM lint_blk k WHERE k.task_id = c.id"
    "     AND k.start_ns >= b.ts AND k.start_ns < b.ts + b.len)"
    " FROM c JOIN best b ON b.id = c.id ORDER BY c.id";

static void never_row(lint *L, sqlite3_stmt *st)
{
    int64_t id = sqlite3_column_int64(st, 0), step = ls_col_ts(st, 3);
    int64_t resumes = sqlite3_column_int64(st, 4), life = ls_col_ts(st, 5);
    int64_t ts = ls_col_ts(st, 6), blocked = ls_col_ts(st, 8);
    const char *name = col_text(st, 1), *fn = col_text(st, 2);
    char *clean = site_text(NULL, 0, fn);
    char extra[96] = "";
    if (blocked > 0)
        snprintf(extra, sizeof(extra), "; %s of it blocked off-cpu, see blocking-step", dur(blocked));
    int pct = life > 0 ? (int)fmin(100.0 * (double)step / (double)life, 100) : 100;
    if (pct > 100)
        pct = 100;
    if (resumes <= 1)
        warn_begin(L, R_NEVER_YIELDS, id, name,
                   "task '%s' (id %lld) never yielded: its only step ran %s (%d%% of its "
                   "lifetime) in %s (%s)%s", task_or(name), (long long)id, dur(step), pct,
                   clean ? clean : "?", at(L, ts), extra);
    else
        warn_begin(L, R_NEVER_YIELDS, id, name,
                   "task '%s' (id %lld) ran %s without yielding (the longest of its %lld steps, "
                   "%d%% of its lifetime) in %s (%s)%s", task_or(name), (long long)id, dur(step),
                   (long long)resumes, pct, clean ? clean : "?", at(L, ts), extra);
    ev_int(L, "step_start_ns", ts - L->start);
    ev_int(L, "step_ns", step);
    ev_int(L, "steps", resumes);
    ev_int(L, "lifetime_ns", life);
    ev_int(L, "blocked_off_cpu_ns", blocked);
    ev_str(L, "function", fn);
    warn_end(L);
    free(clean);
}

/* ---------------------------------------------------------- leaked-task */

/* What the task was doing when the verdict came: its last suspend. */
static const char leak_sql[] =
    "SELECT l.task_id, t.name, l.reason, k.name, l.ts_ns, s.ts_ns, r.name, s.arg0"
    /* one verdict per task and kind (libevl gives one): each costs a lookup */
    " FROM (SELECT task_id, reason, min(ts_ns) AS ts_ns, rid FROM lint_ev"   /* rid: of the min */
    "   WHERE kind = 9 AND reason IN (1, 2) GROUP BY task_id, reason) l"
    " LEFT JOIN tasks t ON t.id = l.task_id"
    " LEFT JOIN leak_kinds k ON k.id = l.reason"
    " LEFT JOIN events s ON s.rowid = (SELECT p.rowid FROM events p WHERE p.task_id = l.task_id"
    "   AND p.kind = 5 AND p.ts_ns <= l.ts_ns ORDER BY p.ts_ns DESC, p.rowid DESC LIMIT 1)"
    " LEFT JOIN suspend_reasons r ON r.id = s.reason"
    " ORDER BY l.ts_ns, l.rid";

static void awaits_text(char *buf, size_t n, const char *reason, int64_t obj)
{
    if (!reason)
        snprintf(buf, n, "?");
    else if (!strcmp(reason, "task"))
        snprintf(buf, n, "task (id %lld)", (long long)obj);
    else if (!strcmp(reason, "io"))
        snprintf(buf, n, "io (fd %lld)", (long long)obj);
    else if (!strcmp(reason, "sleep") || !strcmp(reason, "yield"))
        snprintf(buf, n, "%s", reason);
    else
        snprintf(buf, n, "%s 0x%llx", reason, (unsigned long long)obj);
}

static void leak_row(lint *L, sqlite3_stmt *st)
{
    int64_t id = sqlite3_column_int64(st, 0), kind = sqlite3_column_int64(st, 2);
    int64_t ts = ls_col_ts(st, 4);
    const char *name = col_text(st, 1), *kname = col_text(st, 3), *reason = col_text(st, 6);
    char what[160] = "", aw[80];
    if (!col_null(st, 5)) {
        awaits_text(aw, sizeof(aw), reason, sqlite3_column_int64(st, 7));
        snprintf(what, sizeof(what), " (suspended on %s since %s)", aw,
                 at(L, ls_col_ts(st, 5)));
    }
    warn_begin(L, R_LEAKED, id, name, "task '%s' (id %lld) leaked at %s: %s%s", task_or(name),
               (long long)id, at(L, ts), kind == 1 ? "still pending when its loop closed"
                                                   : "awaits a future that nothing can complete",
               what);
    ev_str(L, "verdict", kname);
    ev_int(L, "leak_ns", ts - L->start);
    if (!col_null(st, 5)) {
        ev_int(L, "suspended_ns", ls_col_ts(st, 5) - L->start);
        ev_str(L, "suspend_reason", reason);
        ev_int(L, "awaited", sqlite3_column_int64(st, 7));
    }
    warn_end(L);
}

/* ---------------------------------------------------------- lost-wakeup */

/* Every unfinished task with its last lifecycle event (create..finish). */
static const char lost_sql[] =
    "SELECT t.id, t.name, coalesce(l.stopped_ns, ?2) AS stop, l.stopped_ns IS NOT NULL,"
    "  e.kind, e.ts_ns, e.reason, e.arg0, a.name, a.ended_ns, wk.name, sr.name,"
    "  (SELECT min(c.ts_ns) FROM lint_ev c WHERE c.task_id = t.id AND c.kind = 8"
    "     AND c.ts_ns >= e.ts_ns)"
    " FROM tasks t LEFT JOIN loops l ON l.id = t.loop_id"
    " JOIN events e ON e.rowid = (SELECT p.rowid FROM events p WHERE p.task_id = t.id"
    "   AND p.kind BETWEEN 3 AND 7 ORDER BY p.ts_ns DESC, p.rowid DESC LIMIT 1)"
    " LEFT JOIN tasks a ON e.kind = 5 AND e.reason = 4 AND a.id = e.arg0"
    " LEFT JOIN waker_kinds wk ON e.kind = 6 AND wk.id = e.reason"
    " LEFT JOIN suspend_reasons sr ON e.kind = 5 AND sr.id = e.reason"
    " WHERE t.ended_ns IS NULL ORDER BY t.id";

static void lost_row(lint *L, sqlite3_stmt *st)
{
    int64_t id = sqlite3_column_int64(st, 0), stop = ls_col_ts(st, 2);
    bool stopped = sqlite3_column_int(st, 3) != 0;
    int kind = sqlite3_column_int(st, 4);
    int64_t ts = ls_col_ts(st, 5), reason = sqlite3_column_int64(st, 6);
    int64_t arg0 = sqlite3_column_int64(st, 7);
    const char *name = col_text(st, 1), *awaited = col_text(st, 8);
    const char *waker = col_text(st, 10), *sreason = col_text(st, 11);
    const char *until = stopped ? "its loop stopped" : "the recording ended";
    if (kind == 6 && stop - ts >= L->thr) {                          /* (a) */
        warn_begin(L, R_LOST_WAKEUP, id, name,
                   "task '%s' (id %lld) was woken (%s) at %s but never ran again; %s %s later",
                   task_or(name), (long long)id, waker ? waker : "?", at(L, ts), until,
                   dur(stop - ts));
        ev_str(L, "case", "woken, never ran");
        ev_int(L, "wake_ns", ts - L->start);
        ev_str(L, "waker_kind", waker);
        if (arg0 > 0)
            ev_int(L, "waker_task", arg0);
    } else if (kind == 5 && reason == 4 && !col_null(st, 9) &&
               stop - (ls_col_ts(st, 9) > ts ? ls_col_ts(st, 9) : ts) >= L->thr) {
        int64_t done = ls_col_ts(st, 9);                  /* (b) */
        warn_begin(L, R_LOST_WAKEUP, id, name,
                   "task '%s' (id %lld) awaits task '%s' (id %lld), which finished at %s, but "
                   "was never woken; %s %s later", task_or(name), (long long)id,
                   task_or(awaited), (long long)arg0, at(L, done), until,
                   dur(stop - (done > ts ? done : ts)));
        ev_str(L, "case", "awaited task finished, never woken");
        ev_int(L, "suspend_ns", ts - L->start);
        ev_int(L, "awaited_task", arg0);
        ev_int(L, "awaited_end_ns", done - L->start);
    } else if (kind == 5 && !col_null(st, 12) && stop - ls_col_ts(st, 12) >= L->thr) {
        int64_t c = ls_col_ts(st, 12);                    /* (c) */
        warn_begin(L, R_LOST_WAKEUP, id, name,
                   "task '%s' (id %lld) was cancelled at %s while suspended on %s, but was "
                   "never woken; %s %s later", task_or(name), (long long)id, at(L, c),
                   sreason ? sreason : "?", until, dur(stop - c));
        ev_str(L, "case", "cancelled, never woken");
        ev_int(L, "suspend_ns", ts - L->start);
        ev_str(L, "suspend_reason", sreason);
        ev_int(L, "cancel_ns", c - L->start);
    } else {
        return;
    }
    ev_int(L, "stop_ns", stop - L->start);
    warn_end(L);
}

/* ---------------------------------------------------- unretrieved-error */

/* libevl's verdicts, then failed tasks without one that nobody awaited.
 * The awaited set is computed from lint_ev (suspends on a task). */
static const char unretrieved_sql[] =
    "SELECT t.id, t.name, t.final_state, t.error, t.ended_ns, v.ts_ns, t.parent_id, p.name"
    " FROM tasks t LEFT JOIN (SELECT task_id, min(ts_ns) AS ts_ns FROM lint_ev"
    "   WHERE kind = 9 AND reason = 3 GROUP BY task_id) v ON v.task_id = t.id"
    " LEFT JOIN tasks p ON p.id = t.parent_id"
    " WHERE v.ts_ns IS NOT NULL OR (t.final_state = 5"
    "   AND NOT EXISTS (SELECT 1 FROM lint_ev w WHERE w.kind = 5 AND w.arg0 = t.id"
    "     AND w.reason = 4)"
    "   AND NOT EXISTS (SELECT 1 FROM lint_ev g WHERE g.task_id = t.parent_id AND g.kind = 5"
    "     AND g.reason = 7 AND g.ts_ns BETWEEN t.created_ns AND t.ended_ns))"
    " ORDER BY coalesce(v.ts_ns, t.ended_ns), t.id";

static void unretrieved_row(lint *L, sqlite3_stmt *st)
{
    int64_t id = sqlite3_column_int64(st, 0), err = sqlite3_column_int64(st, 3);
    const char *name = col_text(st, 1);
    char e[32];
    ls_fmt_err(e, sizeof(e), err);
    bool verdict = !col_null(st, 5);
    int state = sqlite3_column_int(st, 2);
    const char *how = state == 5 ? "failed" : state == 6 ? "was cancelled" : "ended";
    if (verdict)
        warn_begin(L, R_UNRETRIEVED, id, name,
                   "task '%s' (id %lld) %s with %s and nobody retrieved the error "
                   "(unretrieved verdict at %s)", task_or(name), (long long)id, how, e,
                   at(L, ls_col_ts(st, 5)));
    else
        warn_begin(L, R_UNRETRIEVED, id, name,
                   "task '%s' (id %lld) failed with %s at %s and no task awaited it",
                   task_or(name), (long long)id, e, at(L, ls_col_ts(st, 4)));
    ev_str(L, "case", verdict ? "unretrieved verdict" : "failed, no awaiter");
    ev_int(L, "error", err);
    ev_str(L, "error_name", e);
    if (!col_null(st, 4))
        ev_int(L, "ended_ns", ls_col_ts(st, 4) - L->start);
    if (verdict)
        ev_int(L, "verdict_ns", ls_col_ts(st, 5) - L->start);
    if (!col_null(st, 6)) {
        ev_int(L, "parent_id", sqlite3_column_int64(st, 6));
        ev_str(L, "parent", col_text(st, 7));
    }
    warn_end(L);
}

/* ------------------------------------------------------------ self-wake */

static const char self_sql[] =
    "SELECT w.task_id, t.name, count(*), min(w.ts_ns), group_concat(DISTINCT k.name)"
    " FROM lint_ev w LEFT JOIN tasks t ON t.id = w.task_id"
    " LEFT JOIN waker_kinds k ON k.id = w.reason"
    " WHERE w.kind = 6 GROUP BY w.task_id ORDER BY min(w.ts_ns), w.task_id";

static void self_row(lint *L, sqlite3_stmt *st)
{
    int64_t id = sqlite3_column_int64(st, 0), n = sqlite3_column_int64(st, 2);
    const char *name = col_text(st, 1), *kinds = col_text(st, 4);
    warn_begin(L, R_SELF_WAKE, id, name, "task '%s' (id %lld) woke itself %lld time%s (%s), "
               "first at %s", task_or(name), (long long)id, (long long)n, n == 1 ? "" : "s",
               kinds ? kinds : "?", at(L, ls_col_ts(st, 3)));
    ev_int(L, "count", n);
    ev_int(L, "first_ns", ls_col_ts(st, 3) - L->start);
    ev_str(L, "waker_kinds", kinds);
    warn_end(L);
}

/* ----------------------------------------------------------- late-timer */

/* The timer_lateness view, computed without its lookup per wake (which
 * scans back over every event of the task that is not a suspend: quadratic
 * on a task woken many times without suspending): each wake's last
 * suspend is a running max() of the suspends' rowids in time order. */
static const char late_sql[] =
    "WITH w AS (SELECT task_id, kind, reason, ts_ns, max(CASE WHEN kind = 5 THEN rowid END)"
    "    OVER (PARTITION BY task_id ORDER BY ts_ns) AS srid"    /* RANGE: ts <= this one's */
    "    FROM events WHERE task_id IS NOT NULL AND kind IN (5, 6)),"
    " tl AS (SELECT w.task_id, s.arg0 AS deadline_ns, w.ts_ns AS fired_ns,"
    "    w.ts_ns - s.arg0 AS late_ns FROM w JOIN events s ON s.rowid = w.srid"
    "    WHERE w.kind = 6 AND w.reason = 1 AND s.reason = 1)"
    " SELECT x.task_id, t.name, x.n, x.worst, x.worst_at, x.deadline"
    " FROM (SELECT task_id, count(*) AS n, max(late_ns) AS worst,"
    "         fired_ns AS worst_at, deadline_ns AS deadline"   /* bare columns: of the max row */
    "       FROM tl WHERE late_ns > ?4 GROUP BY task_id) x"
    " LEFT JOIN tasks t ON t.id = x.task_id ORDER BY x.worst_at, x.task_id";

static void late_row(lint *L, sqlite3_stmt *st)
{
    int64_t id = sqlite3_column_int64(st, 0), n = sqlite3_column_int64(st, 2);
    int64_t worst = ls_col_ts(st, 3), when = ls_col_ts(st, 4);
    const char *name = col_text(st, 1);
    if (n == 1)
        warn_begin(L, R_LATE_TIMER, id, name, "task '%s' (id %lld): a timer fired %s late "
                   "(deadline %s, fired %s)", task_or(name), (long long)id, dur(worst),
                   at(L, ls_col_ts(st, 5)), at(L, when));
    else
        warn_begin(L, R_LATE_TIMER, id, name, "task '%s' (id %lld): %lld timers fired more "
                   "than %s late, the worst %s late (fired %s)", task_or(name), (long long)id,
                   (long long)n, dur(L->late), dur(worst), at(L, when));
    ev_int(L, "count", n);
    ev_int(L, "threshold_ns", L->late);
    ev_int(L, "worst_late_ns", worst);
    ev_int(L, "worst_deadline_ns", ls_col_ts(st, 5) - L->start);
    ev_int(L, "worst_fired_ns", when - L->start);
    warn_end(L);
}

/* ---------------------------------------------------------- lossy-trace */

static void lossy(lint *L)
{
    ls_drops d;
    ls_read_drops(L->t, &d);
    if (!ls_drops_lossy(&d))
        return;
    char what[320] = "", part[128];
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
    }
    warn_begin(L, R_LOSSY, -1, NULL, "the recording lost data: %s; other warnings may be "
               "missing or wrong (record with a larger --ringbuf-kb)", what);
    static const char *const keys[] = { "dropped_messages", "dropped_bytes", "rejected_records",
                                        "read_errors", "dropped_events_claimed" };
    int64_t vals[] = { d.messages, d.bytes, d.rejected, d.read_errors, d.claimed };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (vals[i] >= 0)
            ev_int(L, keys[i], vals[i]);
    warn_end(L);
}

/* -------------------------------------------------------------- command */

/* The one pass over events: the rare ones the rules need, indexed for
 * the rules' lookups (by task, and by awaited task), and the off-CPU
 * episodes by task. */
static const char lint_ev_sql[] =
    "CREATE TEMP TABLE lint_ev AS SELECT rowid AS rid, ts_ns, task_id, kind, reason, arg0"
    " FROM events WHERE kind IN (8, 9) OR (kind = 5 AND reason IN (4, 7))"
    "   OR (kind = 6 AND arg0 = task_id AND reason <> 6);"
    "CREATE INDEX temp.lint_ev_task ON lint_ev(task_id, kind, reason, ts_ns);"
    "CREATE INDEX temp.lint_ev_arg ON lint_ev(kind, arg0);"
    "CREATE TEMP TABLE lint_blk AS SELECT task_id, start_ns, dur_ns FROM blocking WHERE kind = 1;"
    "CREATE INDEX temp.lint_blk_task ON lint_blk(task_id, start_ns);";

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
    sqlite3_exec(t->db, "PRAGMA mmap_size = 4294967296; PRAGMA cache_size = -262144;"
                        " PRAGMA temp_store = MEMORY", NULL, NULL, NULL);
    lint L = { .t = t };
    L.start = ls_meta_ts(t, "start_ns", 0);
    L.end = ls_meta_ts(t, "end_ns", L.start);
    L.thr = ls_meta_ts(t, "block_threshold_ns", 0);
    if (L.thr <= 0)
        L.thr = 10000000;
    L.generic = ls_is_generic(t);
    L.late = o.late >= 0 ? ls_ts(o.late) : ls_meta_int(t, "block_threshold_ns", 0) > 0 ? L.thr : 5000000;
    bool ok = ls_create_app_frames(t);
    char *msg = NULL;
    if (ok && sqlite3_exec(t->db, lint_ev_sql, NULL, NULL, &msg) != SQLITE_OK) {
        ls_error("reading trace '%s': %s", path, msg ? msg : "?");
        sqlite3_free(msg);
        ok = false;
    }
    ls_json jj;
    if (ok && json) {
        L.j = &jj;
        ls_json_init(L.j, stdout);
        ls_json_begin_array(L.j);
    }
    static const struct { const char *sql; void (*row)(lint *, sqlite3_stmt *); } rules[] = {
        { blocking_sql, blocking_row }, { never_sql, never_row }, { leak_sql, leak_row },
        { lost_sql, lost_row }, { unretrieved_sql, unretrieved_row }, { self_sql, self_row },
        { late_sql, late_row },
    };
    /* Generic traces have no lifecycle: blocking-step and loop-lag only. */
    for (size_t i = 0; ok && i < (L.generic ? 1 : sizeof(rules) / sizeof(rules[0])); i++) {
        sqlite3_stmt *st = prep(&L, rules[i].sql);
        ok = st && run_rows(&L, st, rules[i].row);
        if (ok && i == 0)
            ok = loop_lag_all(&L);
    }
    if (ok)
        lossy(&L);
    if (L.j) {
        ls_json_end_array(L.j);
    } else if (ok) {
        if (!L.total) {
            printf("no warnings%s\n", L.generic ? " (generic loop mode: the task lifecycle rules "
                                                 "do not apply)" : "");
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
