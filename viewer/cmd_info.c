/*
 * cmd_info.c -- `loopscope info TRACE`: what was recorded.
 */
#include "commands.h"
#include "evchunk.h"
#include "loopstat.h"
#include "output.h"
#include "trace.h"
#include "ls_codes.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char usage[] =
    "usage: loopscope info TRACE [--json]\n"
    "\n"
    "What was recorded: target, duration, loops, tasks, events, what was lost\n"
    "(ring-buffer messages, their bytes and the events the target claims were in\n"
    "them; malformed records rejected; unreadable batches), settings, blocking\n"
    "episodes.\n"
    "\n"
    "A trace of the generic loop mode (a process not built on libevl) also shows\n"
    "whether it has a task lifecycle (its asyncio tasks read by a census every\n"
    "few ms: the mode line says so, the tasks and events lines are the\n"
    "lifecycle's, and `censuses` how many were read), its runtime and, per loop\n"
    "thread, the iterations\n"
    "(a wait call's return to the next one's), iterations per second, the share\n"
    "of its windows' time busy (not in the wait call) and waiting (in it) -- and\n"
    "unknown, when the windows hold time that is neither (never counted busy) --\n"
    "and the histogram of the busy time per\n"
    "iteration (the loop's lag) with p50/p90/p99 -- upper bounds of the\n"
    "power-of-two buckets that hold them -- and the longest iteration measured.\n"
    "\n"
    "example: loopscope info trace.db\n";

/* What was lost, one line each; nothing when all is zero. */
static void print_drops(const ls_drops *d, bool cut_short)
{
    char claim[96] = "";
    if (d->claimed >= 0)
        snprintf(claim, sizeof(claim), " (the target claims %lld event%s in them)",
                 (long long)d->claimed, d->claimed == 1 ? "" : "s");
    if (d->messages < 0) {
        printf("drops:     %s\n", cut_short ? "unknown: the recording was cut short before they "
                                               "were counted" : "not recorded");
        if (d->claimed > 0)
            printf("dropped:   the target claims %lld event%s lost (unverified) -- this trace "
                   "may be LOSSY\n", (long long)d->claimed, d->claimed == 1 ? "" : "s");
    } else if (d->messages > 0) {
        char bytes[48] = "";
        if (d->bytes >= 0)
            snprintf(bytes, sizeof(bytes), " (%.0f KiB)", (double)d->bytes / 1024);
        printf("dropped:   %lld message%s%s lost in the ring buffer%s -- this trace is LOSSY\n",
               (long long)d->messages, d->messages == 1 ? "" : "s", bytes, claim);
    } else if (d->claimed > 0) {
        printf("dropped:   no message lost in the ring buffer, but the target claims %lld "
               "event%s lost (unverified)\n", (long long)d->claimed, d->claimed == 1 ? "" : "s");
    }
    if (d->rejected > 0)
        printf("malformed records rejected: %lld\n", (long long)d->rejected);
    if (d->read_errors > 0)
        printf("read errors: %lld batch%s could not be read\n", (long long)d->read_errors,
               d->read_errors == 1 ? "" : "es");
    if (d->lost_episodes > 0)
        printf("lost:      %lld blocking episode%s (too many loop threads blocked at once) -- "
               "this trace is LOSSY\n", (long long)d->lost_episodes,
               d->lost_episodes == 1 ? "" : "s");
    if (d->loop_lost > 0)
        printf("lost:      %lld record%s dropped by the target's loops while the recorder "
               "held every buffer (their count) -- this trace is LOSSY\n",
               (long long)d->loop_lost, d->loop_lost == 1 ? "" : "s");
}

#define HIST_BAR 40            /* width of a histogram bar */
#define MAX_LOOPS_SHOWN 32     /* loop threads detailed in the text output */

/* What the generic loop mode's wait_calls meta value means. */
static const char *wait_calls_text(const char *w)
{
    if (!w)
        return "not recorded";
    if (!strcmp(w, "epoll"))
        return "epoll_wait, epoll_pwait and epoll_pwait2";
    if (!strcmp(w, "all"))
        return "every wait call (epoll, poll, select)";
    return NULL;
}

static double pct(int64_t part, double whole)
{
    return whole > 0 ? 100.0 * (double)part / whole : 0;
}

/* The shares of the windows' time busy, waiting and unknown (loopstat.h's
 * rule, the one timeline and export use; the sums saturate: doubles). */
static ls_shares shares(const ls_loopstat *l)
{
    return ls_window_shares((double)l->span_ns, (double)l->busy_ns, (double)l->wait_ns);
}

/* "p50 < 262us" or "p99 <= 52.4ms" (the measured maximum bounds it). */
static void print_quantile(const ls_loopstat *l, const char *name, double q, const char *sep)
{
    int64_t lo, hi;
    bool capped;
    char d[32];
    if (ls_hist_quantile(l, q, &lo, &hi, &capped))
        printf("%s%s %s %s", sep, name, capped ? "<=" : "<", ls_fmt_dur(d, sizeof(d), hi));
}

/* bpftrace-like: one row per bucket from the first to the last non-empty. */
static void print_hist(const ls_loopstat *l)
{
    int first = -1, last = -1;
    int64_t top = 0;
    for (int i = 0; i < l->nhist; i++)
        if (l->hist[i].count > 0) {
            if (first < 0)
                first = i;
            last = i;
            if (l->hist[i].count > top)
                top = l->hist[i].count;
        }
    if (first < 0)
        return;
    printf("  %-22s %10s %-*s %s\n", "busy per iteration", "iterations", HIST_BAR + 2, "",
           "share of busy time");
    for (int i = first; i <= last; i++) {
        const ls_bucket *b = &l->hist[i];
        char d1[32], d2[32], range[80], bar[HIST_BAR + 1];
        snprintf(range, sizeof(range), "[%s, %s)", b->lo ? ls_fmt_dur(d1, sizeof(d1), b->lo) : "0",
                 ls_fmt_dur(d2, sizeof(d2), b->hi));
        int n = top > 0 ? (int)((double)b->count * HIST_BAR / (double)top + 0.5) : 0;
        if (n == 0 && b->count > 0)
            n = 1;
        memset(bar, '@', (size_t)n);
        bar[n] = 0;
        printf("  %-22s %10lld |%-*s| %5.1f%%\n", range, (long long)b->count, HIST_BAR, bar,
               pct(b->busy, (double)l->hist_busy));
    }
}

/* A process group's trace: each process, from the processes table (json:
 * into "processes"), with its loops and blocking episodes. */
static void print_processes(ls_trace *t, ls_json *j, int64_t start)
{
    if (!ls_has_table(t, "processes") || !ls_query_int(t, "SELECT count(*) FROM processes"))
        return;
    sqlite3_stmt *st = ls_prepare(t,
        "SELECT p.pid, p.parent_pid, p.binary, p.mode, p.runtime, p.attached_ns, p.ended_ns,"
        " p.end_reason, (SELECT count(*) FROM loops l WHERE l.pid = p.pid),"
        " (SELECT count(*) FROM blocking b JOIN loops l ON l.id = b.loop_id WHERE l.pid = p.pid)"
        " FROM processes p ORDER BY p.id");
    if (!st)
        return;
    char d1[32], d2[32];
    if (j) {
        ls_json_key(j, "processes");
        ls_json_begin_array(j);
    } else {
        printf("processes: %lld (a process group; --pid PID shows one alone)\n",
               (long long)ls_query_int(t, "SELECT count(*) FROM processes"));
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t pid = sqlite3_column_int64(st, 0), parent = sqlite3_column_int64(st, 1);
        const char *bin = ls_col_text(st, 2), *mode = ls_col_text(st, 3),
                   *rt = ls_col_text(st, 4), *why = ls_col_text(st, 7);
        int64_t at = sqlite3_column_int64(st, 5), end = sqlite3_column_int64(st, 6);
        bool ended = sqlite3_column_type(st, 6) != SQLITE_NULL;
        if (j) {
            ls_json_begin_object(j);
            ls_json_key(j, "pid"); ls_json_int(j, pid);
            ls_json_key(j, "parent_pid");
            if (parent)
                ls_json_int(j, parent);
            else
                ls_json_null(j);
            ls_json_key(j, "binary"); ls_json_str(j, bin);
            ls_json_key(j, "mode"); ls_json_str(j, mode);
            ls_json_key(j, "runtime"); ls_json_str(j, rt);
            ls_json_key(j, "attached_ns"); ls_json_int(j, at);
            ls_json_key(j, "ended_ns");
            if (ended)
                ls_json_int(j, end);
            else
                ls_json_null(j);
            ls_json_key(j, "end_reason"); ls_json_str(j, why);
            ls_json_key(j, "loops"); ls_json_int(j, sqlite3_column_int64(st, 8));
            ls_json_key(j, "blocking"); ls_json_int(j, sqlite3_column_int64(st, 9));
            ls_json_end_object(j);
            continue;
        }
        const char *base = bin ? strrchr(bin, '/') : NULL;
        printf("  pid %-7lld %-14s %-8s %lld loop%s, %lld blocking; +%s..%s%s%s", (long long)pid,
               ls_term(base ? base + 1 : bin ? bin : "?"), mode ? ls_term(mode) : "?",
               (long long)sqlite3_column_int64(st, 8), sqlite3_column_int64(st, 8) == 1 ? "" : "s",
               (long long)sqlite3_column_int64(st, 9), ls_fmt_dur(d1, sizeof(d1), at - start),
               ended ? "+" : "", ended ? ls_fmt_dur(d2, sizeof(d2), end - start) : " the end",
               ended && why ? " " : "");
        if (ended && why)
            printf("(%s)", ls_term(why));
        if (parent)
            printf(", forked by %lld", (long long)parent);
        putchar('\n');
    }
    sqlite3_finalize(st);
    if (j)
        ls_json_end_array(j);
}

/* Per loop thread: iterations, rate, busy share, latency histogram. */
static void print_loop_threads(const ls_loopstat *ls, size_t n, const char *stop, bool group)
{
    char d1[32], d2[32];
    for (size_t i = 0; i < n && i < MAX_LOOPS_SHOWN; i++) {
        const ls_loopstat *l = &ls[i];
        printf("\nloop thread %lld", (long long)l->tid);
        if (group && l->pid)
            printf(" of pid %lld", (long long)l->pid);
        else if (l->id != l->tid)
            printf(" (loop %lld)", (long long)l->id);
        if (l->windows) {
            double secs = (double)l->covered_ns / 1e9;
            ls_shares sh = shares(l);
            printf(": %lld iteration%s in %s (%.0f/s), busy %.1f%% (waiting %.1f%%",
                   (long long)l->iterations, l->iterations == 1 ? "" : "s",
                   ls_fmt_dur(d1, sizeof(d1), l->covered_ns),
                   secs > 0 ? (double)l->iterations / secs : 0.0, 100 * sh.busy, 100 * sh.wait);
            if (sh.unknown >= 0.0005)     /* shown as 0.1% or more */
                printf(", unknown %.1f%%: neither busy nor waiting in the recorded windows",
                       100 * sh.unknown);
            printf(")\n");
        } else if (l->hist_count > 0) {
            printf(": %lld iteration%s (poll to poll: no windows recorded)\n",
                   (long long)l->hist_count, l->hist_count == 1 ? "" : "s");
        } else {
            printf(": no iteration windows recorded\n");
        }
        if (l->bad_windows || l->overlaps)
            printf("  (windows: %lld malformed ignored, %lld overlapping the previous one: "
                   "figures approximate)\n", (long long)l->bad_windows, (long long)l->overlaps);
        if (l->hist_count > 0) {
            printf("  iteration latency (busy time per iteration):");
            print_quantile(l, "p50", 0.50, " ");
            print_quantile(l, "p90", 0.90, ", ");
            print_quantile(l, "p99", 0.99, ", ");
            if (l->windows)
                printf(", max %s", ls_fmt_dur(d2, sizeof(d2), l->max_busy_ns));
            printf("\n  (p50/p90/p99: upper bounds of the power-of-two buckets holding them%s)\n",
                   l->windows ? "; max: measured" : "");
            print_hist(l);
        } else {
            printf("  iteration latency: histogram missing (written when the recording ends; "
                   "stop reason: %s)%s%s\n", stop ? ls_term(stop) : "?",
                   l->windows ? "; longest iteration in the windows: " : "",
                   l->windows ? ls_fmt_dur(d2, sizeof(d2), l->max_busy_ns) : "");
        }
        if (l->hist_bad)
            printf("  (histogram: %lld malformed bucket%s ignored)\n", (long long)l->hist_bad,
                   l->hist_bad == 1 ? "" : "s");
    }
    if (n > MAX_LOOPS_SHOWN)
        printf("\n%zu more loop threads not shown (see --json)\n", n - MAX_LOOPS_SHOWN);
}

static void json_quantile(ls_json *j, const ls_loopstat *l, const char *key, double q)
{
    int64_t lo, hi;
    bool capped;
    ls_json_key(j, key);
    if (!ls_hist_quantile(l, q, &lo, &hi, &capped)) {
        ls_json_null(j);
        return;
    }
    ls_json_begin_object(j);
    ls_json_key(j, "lo_ns"); ls_json_int(j, lo);
    ls_json_key(j, "hi_ns"); ls_json_int(j, hi);
    ls_json_key(j, "hi_is_max"); ls_json_bool(j, capped);
    ls_json_end_object(j);
}

static void json_loop_threads(ls_json *j, const ls_loopstat *ls, size_t n)
{
    ls_json_key(j, "loop_threads");
    ls_json_begin_array(j);
    for (size_t i = 0; i < n; i++) {
        const ls_loopstat *l = &ls[i];
        double secs = (double)l->covered_ns / 1e9;
        ls_json_begin_object(j);
        ls_json_key(j, "loop_id"); ls_json_int(j, l->id);
        ls_json_key(j, "tid"); ls_json_int(j, l->tid);
        ls_json_key(j, "windows"); ls_json_int(j, l->windows);
        ls_json_key(j, "malformed_windows"); ls_json_int(j, l->bad_windows);
        ls_json_key(j, "overlapping_windows"); ls_json_int(j, l->overlaps);
        ls_json_key(j, "iterations"); ls_json_int(j, l->iterations);
        ls_json_key(j, "covered_ns"); ls_json_int(j, l->covered_ns);
        ls_json_key(j, "iterations_per_s"); ls_json_double(j, secs > 0 ? (double)l->iterations / secs : 0);
        ls_json_key(j, "busy_ns"); ls_json_int(j, l->busy_ns);
        ls_json_key(j, "wait_ns"); ls_json_int(j, l->wait_ns);
        ls_shares sh = shares(l);
        ls_json_key(j, "span_ns"); ls_json_int(j, l->span_ns);
        ls_json_key(j, "busy_pct"); ls_json_double(j, 100 * sh.busy);
        ls_json_key(j, "wait_pct"); ls_json_double(j, 100 * sh.wait);
        ls_json_key(j, "unknown_pct"); ls_json_double(j, 100 * sh.unknown);
        ls_json_key(j, "max_busy_ns");
        if (l->windows)
            ls_json_int(j, l->max_busy_ns);
        else
            ls_json_null(j);
        ls_json_key(j, "histogram");
        if (l->hist_count <= 0) {
            ls_json_null(j);
        } else {
            ls_json_begin_object(j);
            ls_json_key(j, "iterations"); ls_json_int(j, l->hist_count);
            json_quantile(j, l, "p50", 0.50);
            json_quantile(j, l, "p90", 0.90);
            json_quantile(j, l, "p99", 0.99);
            ls_json_key(j, "buckets");
            ls_json_begin_array(j);
            for (int b = 0; b < l->nhist; b++) {
                ls_json_begin_object(j);
                ls_json_key(j, "lo_ns"); ls_json_int(j, l->hist[b].lo);
                ls_json_key(j, "hi_ns"); ls_json_int(j, l->hist[b].hi);
                ls_json_key(j, "count"); ls_json_int(j, l->hist[b].count);
                ls_json_key(j, "busy_ns"); ls_json_int(j, l->hist[b].busy);
                ls_json_end_object(j);
            }
            ls_json_end_array(j);
            ls_json_end_object(j);
        }
        ls_json_key(j, "malformed_buckets"); ls_json_int(j, l->hist_bad);
        ls_json_end_object(j);
    }
    ls_json_end_array(j);
}

int cmd_info(int argc, char **argv)
{
    bool json = false;
    const char *path = NULL;
    if (ls_parse_common(argc, argv, usage, &path, &json, NULL, NULL) != 0)
        return 2;
    ls_trace *t = ls_trace_open(path);
    if (!t)
        return 1;
    struct stat sb;
    stat(path, &sb);
    char *tool = ls_meta(t, LS_META_TOOL), *cmd = ls_meta(t, LS_META_TARGET_CMDLINE),
         *start = ls_meta(t, LS_META_START_UTC), *why = ls_meta(t, LS_META_STOP_REASON),
         *host = ls_meta(t, LS_META_HOST), *kernel = ls_meta(t, LS_META_KERNEL),
         *mode = ls_meta(t, LS_META_MODE), *blk = ls_meta(t, LS_META_BLOCKING_DETECTION),
         *sys = ls_meta(t, LS_META_SYSCALLS);
    int64_t pid = ls_meta_int(t, LS_META_TARGET_PID, 0),
            dur = ls_meta_int(t, LS_META_DURATION_NS, 0),
            thr = ls_meta_int(t, LS_META_BLOCK_THRESHOLD_NS, 0);
    if (t->cut_short && !why) {       /* the recorder never wrote its end */
        dur = t->cut_at_ns;
        why = strdup("cut short");
    }
    ls_drops dr;
    ls_read_drops(t, &dr);
    int64_t nloops = ls_query_int(t, "SELECT count(*) FROM loops"),
            ntasks = ls_query_int(t, "SELECT count(*) FROM tasks"),
            nfin = ls_query_int(t, "SELECT count(*) FROM tasks WHERE final_state = " LS_SQL_STATE_FINISHED),
            nfail = ls_query_int(t, "SELECT count(*) FROM tasks WHERE final_state = " LS_SQL_STATE_FAILED),
            ncanc = ls_query_int(t, "SELECT count(*) FROM tasks WHERE final_state = " LS_SQL_STATE_CANCELLED),
            npend = ls_query_int(t, "SELECT count(*) FROM tasks WHERE final_state IS NULL"),
            npre = ls_query_int(t, "SELECT count(*) FROM tasks WHERE preexisting"),
            nleak = ls_query_int(t, "SELECT count(*) FROM tasks WHERE leak IS NOT NULL"),
            nev = ls_query_int(t, ls_trace_pid ? "SELECT count(*) FROM events"   /* its own */
                                               : "SELECT " LS_SQL_EVENTS_COUNT),
            nblk = ls_query_int(t, "SELECT count(*) FROM blocking"),
            blkns = ls_query_int(t, "SELECT CAST(total(dur_ns) AS INTEGER) FROM blocking"),
            maxblk = ls_query_int(t, "SELECT coalesce(max(dur_ns), 0) FROM blocking");
    bool generic = ls_is_generic(t);
    /* A generic trace may have a task lifecycle too: a census of its asyncio
     * tasks (ls_lifecycle_source); then its tasks and events lines are the
     * lifecycle's, as for libevl. */
    bool lifecycle = ls_has_lifecycle(t);
    char *source = ls_lifecycle_text(t), *task_src = ls_meta(t, LS_META_TASK_SOURCE),
         *censuses = ls_meta(t, LS_META_CENSUSES);
    int64_t census_gap = ls_meta_ts(t, LS_META_CENSUS_MAX_GAP_NS, -1);
    /* Tasks a census never saw (named in a blocking episode only): no
     * lifecycle, so neither pending nor anything else. */
    int64_t nunseen = generic && lifecycle
        ? ls_query_int(t, "SELECT count(*) FROM tasks t WHERE t.final_state IS NULL AND"
                          " t.leak IS NULL AND NOT EXISTS (SELECT 1 FROM task_stats s"
                          " WHERE s.task_id = t.id)") : 0;
    npend -= nunseen;
    char *runtime = ls_meta(t, LS_META_RUNTIME), *waits = ls_meta(t, LS_META_WAIT_CALLS),
         *jit = ls_meta(t, LS_META_JIT_SYMBOLS), *trig = ls_meta(t, LS_META_TRIGGER);
    int64_t window = ls_meta_int(t, LS_META_WINDOW_NS, -1);
    ls_loopstat *ls = NULL;
    size_t nls = 0;
    if (!ls_loopstats_read(t, &ls, &nls)) {
        free(tool); free(cmd); free(start); free(why); free(host); free(kernel); free(mode);
        free(blk); free(sys); free(runtime); free(waits); free(jit); free(trig);
        free(source); free(task_src); free(censuses);
        ls_trace_close(t);
        return 1;
    }
    /* Loop threads are detailed for generic traces, and for any trace
     * whose windows or histogram have rows. */
    bool iters = generic;
    for (size_t i = 0; i < nls; i++)
        iters |= ls[i].windows > 0 || ls[i].nhist > 0 || ls[i].bad_windows || ls[i].hist_bad;
    int64_t nasync = generic ? ls_query_int(t, "SELECT count(*) FROM tasks") : 0;
    char d1[32], d2[32], d3[32], d4[32];
    if (json) {
        ls_json j;
        ls_json_init(&j, stdout);
        ls_json_begin_object(&j);
        ls_json_key(&j, "trace"); ls_json_str(&j, path);
        ls_json_key(&j, "size_bytes"); ls_json_int(&j, sb.st_size);
        ls_json_key(&j, "tool"); ls_json_str(&j, tool);
        ls_json_key(&j, "target_pid"); ls_json_int(&j, pid);
        ls_json_key(&j, "target_cmdline"); ls_json_str(&j, cmd);
        ls_json_key(&j, "start_utc"); ls_json_str(&j, start);
        ls_json_key(&j, "duration_ns"); ls_json_int(&j, dur);
        ls_json_key(&j, "stop_reason"); ls_json_str(&j, why);
        if (trig) {
            ls_json_key(&j, "trigger"); ls_json_str(&j, trig);
        }
        ls_json_key(&j, "host"); ls_json_str(&j, host);
        ls_json_key(&j, "kernel"); ls_json_str(&j, kernel);
        ls_json_key(&j, "mode"); ls_json_str(&j, mode);
        print_processes(t, &j, ls_meta_int(t, LS_META_START_NS, 0));
        ls_json_key(&j, "blocking_detection"); ls_json_str(&j, blk);
        ls_json_key(&j, "block_threshold_ns"); ls_json_int(&j, thr);
        ls_json_key(&j, "syscalls"); ls_json_str(&j, sys);
        ls_json_key(&j, "loops"); ls_json_int(&j, nloops);
        ls_json_key(&j, "tasks");
        if (!lifecycle) {
            ls_json_null(&j);             /* no lifecycle: asyncio_tasks below */
        } else {
            ls_json_begin_object(&j);
            ls_json_key(&j, "total"); ls_json_int(&j, ntasks);
            ls_json_key(&j, "finished"); ls_json_int(&j, nfin);
            ls_json_key(&j, "failed"); ls_json_int(&j, nfail);
            ls_json_key(&j, "cancelled"); ls_json_int(&j, ncanc);
            ls_json_key(&j, "pending"); ls_json_int(&j, npend);
            ls_json_key(&j, "preexisting"); ls_json_int(&j, npre);
            ls_json_key(&j, "leaked"); ls_json_int(&j, nleak);
            if (generic) {            /* only then: libevl outputs stay as they were */
                ls_json_key(&j, "unseen"); ls_json_int(&j, nunseen);
            }
            ls_json_end_object(&j);
        }
        ls_json_key(&j, "events"); ls_json_int(&j, nev);
        /* drop counters: null when the recorder did not write them */
        static const char *const keys[] = { "dropped_messages", "dropped_bytes",
                                            "rejected_records", "read_errors",
                                            "dropped_events_claimed", "lost_episodes" };
        int64_t vals[] = { dr.messages, dr.bytes, dr.rejected, dr.read_errors, dr.claimed,
                           dr.lost_episodes };
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
            ls_json_key(&j, keys[i]);
            if (vals[i] < 0)
                ls_json_null(&j);
            else
                ls_json_int(&j, vals[i]);
        }
        if (dr.loop_lost >= 0) {      /* only then: older outputs stay as they were */
            ls_json_key(&j, "loop_lost_records_claimed");
            ls_json_int(&j, dr.loop_lost);
        }
        ls_json_key(&j, "lossy"); ls_json_bool(&j, ls_drops_lossy(&dr));
        if (t->cut_short) {           /* only then: older outputs stay as they were */
            ls_json_key(&j, "cut_short_at_ns");
            ls_json_int(&j, t->cut_at_ns);
        }
        ls_json_key(&j, "blocking_episodes"); ls_json_int(&j, nblk);
        ls_json_key(&j, "blocked_ns"); ls_json_int(&j, blkns);
        if (generic) {
            ls_json_key(&j, "lifecycle"); ls_json_bool(&j, lifecycle);
            if (task_src) {
                ls_json_key(&j, "task_source"); ls_json_str(&j, task_src);
            }
            if (censuses) {
                ls_json_key(&j, "censuses"); ls_json_str(&j, censuses);
            }
            if (census_gap >= 0) {
                ls_json_key(&j, "census_max_gap_ns"); ls_json_int(&j, census_gap);
            }
            ls_json_key(&j, "runtime"); ls_json_str(&j, runtime);
            ls_json_key(&j, "wait_calls"); ls_json_str(&j, waits);
            ls_json_key(&j, "window_ns");
            if (window >= 0)
                ls_json_int(&j, window);
            else
                ls_json_null(&j);
            ls_json_key(&j, "jit_symbols"); ls_json_str(&j, jit);
            ls_json_key(&j, "asyncio_tasks"); ls_json_int(&j, nasync);
        }
        if (iters)
            json_loop_threads(&j, ls, nls);
        ls_json_end_object(&j);
    } else {
        printf("trace:     %s (schema %lld, %.1f KiB)\n", ls_term(path),
               (long long)ls_query_int(t, "PRAGMA user_version"), sb.st_size / 1024.0);
        printf("recorder:  %s\n", tool ? ls_term(tool) : "?");
        printf("target:    pid %lld  %s\n", (long long)pid, cmd ? ls_term(cmd) : "?");
        printf("recorded:  %s, %s (%s)\n", start ? ls_term(start) : "?", ls_fmt_dur(d1, sizeof(d1), dur),
               why ? ls_term(why) : "?");
        printf("host:      %s, %s\n", host ? ls_term(host) : "?", kernel ? ls_term(kernel) : "?");
        print_processes(t, NULL, ls_meta_int(t, LS_META_START_NS, 0));
        if (trig)                     /* a flight recorder's trace (tracer/README.md) */
            printf("trigger:   %s (flight recorder: %s before it, %s after)\n", ls_term(trig),
                   ls_fmt_dur(d1, sizeof(d1), ls_meta_int(t, LS_META_FLIGHT_WINDOW_NS, 0)),
                   ls_fmt_dur(d2, sizeof(d2), ls_meta_int(t, LS_META_FLIGHT_TAIL_NS, 0)));
        if (t->cut_short)
            printf("cut short: at +%.1f s (the recorder was killed or could not write): counts "
                   "after that are unknown\n", t->cut_at_ns / 1e9);
        if (generic) {
            const char *wt = wait_calls_text(waits);
            if (source)
                printf("mode:      generic loop mode, %s\n", ls_term(source));
            else if (task_src)            /* "none": no census (--no-tasks, not CPython) */
                printf("mode:      generic loop mode (no task lifecycle: the process is not built "
                       "on libevl, and its asyncio tasks were not read: task source %s)\n",
                       ls_term(task_src));
            else
                printf("mode:      generic loop mode (no task lifecycle: the process is not built "
                       "on libevl)\n");
            printf("runtime:   %s; the loop's wait: %s", runtime ? ls_term(runtime) : "?",
                   wt ? wt : ls_term(waits));
            if (window > 0)
                printf("; windows of %s", ls_fmt_dur(d1, sizeof(d1), window));
            printf("\n");
            if (jit)
                printf("jit:       %s\n", ls_term(jit));
            if (censuses) {
                printf("censuses:  %s", ls_term(censuses));
                if (census_gap > 0)     /* the lifecycle's resolution at its worst */
                    printf("; the longest gap between two: %s",
                           ls_fmt_dur(d1, sizeof(d1), census_gap));
                printf("\n");
            }
        }
        printf("settings:  %s, blocking detection %s (threshold %s), syscalls %s\n",
               mode ? ls_term(mode) : "?", blk ? ls_term(blk) : "?", ls_fmt_dur(d2, sizeof(d2), thr),
               sys ? ls_term(sys) : "off");
        /* "none dropped" only from the recorder's own counters, present and 0 */
        bool none = dr.messages == 0 && !ls_drops_lossy(&dr);
        if (generic && lifecycle) {
            printf("loops:     %lld loop thread%s\n", (long long)nloops, nloops == 1 ? "" : "s");
            printf("tasks:     %lld asyncio task%s (%lld finished, %lld failed, %lld cancelled, "
                   "%lld pending; %lld pre-existing, %lld leaked", (long long)ntasks,
                   ntasks == 1 ? "" : "s", (long long)nfin, (long long)nfail, (long long)ncanc,
                   (long long)npend, (long long)npre, (long long)nleak);
            if (nunseen)
                printf("; %lld named in blocking episodes only, never seen by a census",
                       (long long)nunseen);
            printf(")\n");
            printf("events:    %lld%s\n", (long long)nev, none ? " (none dropped)" : "");
        } else if (generic) {
            printf("loops:     %lld loop thread%s\n", (long long)nloops, nloops == 1 ? "" : "s");
            printf("tasks:     no task lifecycle; %lld asyncio task%s named in blocking "
                   "episodes\n", (long long)nasync, nasync == 1 ? "" : "s");
            if (nev)
                printf("events:    %lld%s\n", (long long)nev, none ? " (none dropped)" : "");
            else
                printf("events:    none: generic mode records loop iterations, not task "
                       "events%s\n", none ? " (none dropped)" : "");
        } else {
            printf("loops:     %lld\n", (long long)nloops);
            printf("tasks:     %lld (%lld finished, %lld failed, %lld cancelled, %lld pending; "
                   "%lld pre-existing, %lld leaked)\n", (long long)ntasks, (long long)nfin,
                   (long long)nfail, (long long)ncanc, (long long)npend, (long long)npre,
                   (long long)nleak);
            printf("events:    %lld%s\n", (long long)nev, none ? " (none dropped)" : "");
        }
        print_drops(&dr, t->cut_short);
        printf("blocking:  %lld episode%s, %s in all, longest %s\n", (long long)nblk,
               nblk == 1 ? "" : "s", ls_fmt_dur(d3, sizeof(d3), blkns),
               ls_fmt_dur(d4, sizeof(d4), maxblk));
        if (iters)
            print_loop_threads(ls, nls, why, ls_trace_group(t));
    }
    ls_loopstats_free(ls, nls);
    free(runtime); free(waits); free(jit); free(trig);
    free(source); free(task_src); free(censuses);
    free(tool); free(cmd); free(start); free(why); free(host); free(kernel); free(mode);
    free(blk); free(sys);
    ls_trace_close(t);
    return 0;
}
