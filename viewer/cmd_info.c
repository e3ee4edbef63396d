/*
 * cmd_info.c -- `loopscope info TRACE`: what was recorded.
 */
#include "commands.h"
#include "output.h"
#include "trace.h"

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
    "example: loopscope info trace.db\n";

static int64_t q_int(ls_trace *t, const char *sql)
{
    sqlite3_stmt *st = ls_prepare(t, sql);
    int64_t v = 0;
    if (st && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* What was lost, one line each; nothing when all is zero. */
static void print_drops(const ls_drops *d)
{
    char claim[96] = "";
    if (d->claimed >= 0)
        snprintf(claim, sizeof(claim), " (the target claims %lld event%s in them)",
                 (long long)d->claimed, d->claimed == 1 ? "" : "s");
    if (d->messages < 0) {
        printf("drops:     not recorded\n");
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
    char *tool = ls_meta(t, "tool"), *cmd = ls_meta(t, "target_cmdline"),
         *start = ls_meta(t, "start_utc"), *why = ls_meta(t, "stop_reason"),
         *host = ls_meta(t, "host"), *kernel = ls_meta(t, "kernel"), *mode = ls_meta(t, "mode"),
         *blk = ls_meta(t, "blocking_detection"), *sys = ls_meta(t, "syscalls");
    int64_t pid = ls_meta_int(t, "target_pid", 0), dur = ls_meta_int(t, "duration_ns", 0),
            thr = ls_meta_int(t, "block_threshold_ns", 0);
    ls_drops dr;
    ls_read_drops(t, &dr);
    int64_t nloops = q_int(t, "SELECT count(*) FROM loops"),
            ntasks = q_int(t, "SELECT count(*) FROM tasks"),
            nfin = q_int(t, "SELECT count(*) FROM tasks WHERE final_state = 4"),
            nfail = q_int(t, "SELECT count(*) FROM tasks WHERE final_state = 5"),
            ncanc = q_int(t, "SELECT count(*) FROM tasks WHERE final_state = 6"),
            npend = q_int(t, "SELECT count(*) FROM tasks WHERE final_state IS NULL"),
            npre = q_int(t, "SELECT count(*) FROM tasks WHERE preexisting"),
            nleak = q_int(t, "SELECT count(*) FROM tasks WHERE leak IS NOT NULL"),
            nev = q_int(t, "SELECT max(rowid) FROM events"),
            nblk = q_int(t, "SELECT count(*) FROM blocking"),
            blkns = q_int(t, "SELECT CAST(total(dur_ns) AS INTEGER) FROM blocking"),
            maxblk = q_int(t, "SELECT coalesce(max(dur_ns), 0) FROM blocking");
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
        ls_json_key(&j, "host"); ls_json_str(&j, host);
        ls_json_key(&j, "kernel"); ls_json_str(&j, kernel);
        ls_json_key(&j, "mode"); ls_json_str(&j, mode);
        ls_json_key(&j, "blocking_detection"); ls_json_str(&j, blk);
        ls_json_key(&j, "block_threshold_ns"); ls_json_int(&j, thr);
        ls_json_key(&j, "syscalls"); ls_json_str(&j, sys);
        ls_json_key(&j, "loops"); ls_json_int(&j, nloops);
        ls_json_key(&j, "tasks"); ls_json_begin_object(&j);
        ls_json_key(&j, "total"); ls_json_int(&j, ntasks);
        ls_json_key(&j, "finished"); ls_json_int(&j, nfin);
        ls_json_key(&j, "failed"); ls_json_int(&j, nfail);
        ls_json_key(&j, "cancelled"); ls_json_int(&j, ncanc);
        ls_json_key(&j, "pending"); ls_json_int(&j, npend);
        ls_json_key(&j, "preexisting"); ls_json_int(&j, npre);
        ls_json_key(&j, "leaked"); ls_json_int(&j, nleak);
        ls_json_end_object(&j);
        ls_json_key(&j, "events"); ls_json_int(&j, nev);
        /* drop counters: null when the recorder did not write them */
        static const char *const keys[] = { "dropped_messages", "dropped_bytes",
                                            "rejected_records", "read_errors",
                                            "dropped_events_claimed" };
        int64_t vals[] = { dr.messages, dr.bytes, dr.rejected, dr.read_errors, dr.claimed };
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
            ls_json_key(&j, keys[i]);
            if (vals[i] < 0)
                ls_json_null(&j);
            else
                ls_json_int(&j, vals[i]);
        }
        ls_json_key(&j, "lossy"); ls_json_bool(&j, ls_drops_lossy(&dr));
        ls_json_key(&j, "blocking_episodes"); ls_json_int(&j, nblk);
        ls_json_key(&j, "blocked_ns"); ls_json_int(&j, blkns);
        ls_json_end_object(&j);
    } else {
        printf("trace:     %s (schema %d, %.1f KiB)\n", ls_term(path), LS_TRACE_SCHEMA, sb.st_size / 1024.0);
        printf("recorder:  %s\n", tool ? ls_term(tool) : "?");
        printf("target:    pid %lld  %s\n", (long long)pid, cmd ? ls_term(cmd) : "?");
        printf("recorded:  %s, %s (%s)\n", start ? ls_term(start) : "?", ls_fmt_dur(d1, sizeof(d1), dur),
               why ? ls_term(why) : "?");
        printf("host:      %s, %s\n", host ? ls_term(host) : "?", kernel ? ls_term(kernel) : "?");
        printf("settings:  %s, blocking detection %s (threshold %s), syscalls %s\n",
               mode ? ls_term(mode) : "?", blk ? ls_term(blk) : "?", ls_fmt_dur(d2, sizeof(d2), thr),
               sys ? ls_term(sys) : "off");
        printf("loops:     %lld\n", (long long)nloops);
        printf("tasks:     %lld (%lld finished, %lld failed, %lld cancelled, %lld pending; "
               "%lld pre-existing, %lld leaked)\n", (long long)ntasks, (long long)nfin,
               (long long)nfail, (long long)ncanc, (long long)npend, (long long)npre,
               (long long)nleak);
        /* "none dropped" only from the recorder's own counters, present and 0 */
        bool none = dr.messages == 0 && !ls_drops_lossy(&dr);
        printf("events:    %lld%s\n", (long long)nev, none ? " (none dropped)" : "");
        print_drops(&dr);
        printf("blocking:  %lld episode%s, %s in all, longest %s\n", (long long)nblk,
               nblk == 1 ? "" : "s", ls_fmt_dur(d3, sizeof(d3), blkns),
               ls_fmt_dur(d4, sizeof(d4), maxblk));
    }
    free(tool); free(cmd); free(start); free(why); free(host); free(kernel); free(mode);
    free(blk); free(sys);
    ls_trace_close(t);
    return 0;
}
