/*
 * meta.c -- the meta rows of a trace: how it was recorded (at the start)
 * and what the kernel and the recorder counted (at the end); their keys
 * are documented in tracer/SCHEMA.md.  Part of the recorder (recorder.h).
 */
#define _GNU_SOURCE
#include "recorder.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include "ls_schema.h"
#include "tracer.h"

void ls_write_meta(recorder *r, int argc, char **argv)
{
    struct utsname u;
    uname(&u);
    ls_sink_meta(r, "tool", "loopscope %s", LOOPSCOPE_VERSION);
    ls_sink_meta(r, "schema_version", "%d", LS_SCHEMA_VERSION);
    ls_sink_meta(r, "host", "%s", u.nodename);
    ls_sink_meta(r, "kernel", "%s %s", u.sysname, u.release);
    ls_sink_meta(r, "clock", "CLOCK_MONOTONIC");
    ls_sink_meta(r, "target_pid", "%d", r->pid);
    ls_sink_meta(r, "target_binary", "%s", r->binary);
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/cmdline", r->pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (r->child) {                   /* not exec'd yet: use what we will run */
        n = 0;
        for (char **a = r->cmd; *a && n < (ssize_t)sizeof(buf) - 1; a++)
            n += snprintf(buf + n, sizeof(buf) - (size_t)n, "%s%s", a == r->cmd ? "" : " ", *a);
    } else if (n > 0) {
        for (ssize_t i = 0; i < n - 1; i++)
            if (!buf[i])
                buf[i] = ' ';
    }
    buf[n > 0 ? n : 0] = 0;
    ls_sink_meta(r, "target_cmdline", "%s", buf);
    n = 0;
    for (int i = 0; i < argc && n < (ssize_t)sizeof(buf) - 1; i++)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "%s%s", i ? " " : "", argv[i]);
    ls_sink_meta(r, "recorder_cmdline", "%s", buf);
    ls_sink_meta(r, "mode", "%s", r->generic ? "generic"
                                          : r->no_batch ? "unbatched" : "batched");
    ls_sink_meta(r, "runtime", "%s", r->runtime);
    if (r->generic) {
        ls_sink_meta(r, "wait_calls", "%s", r->wait_all ? "all" : "epoll");
        ls_sink_meta(r, "wait_hook", "%s", r->wait_raw ? "raw" : "tracepoint");
        ls_sink_meta(r, "window_ns", "%llu", (unsigned long long)LS_WINDOW_NS);
    }
    ls_sink_meta(r, "ringbuf_kb", "%u", r->ringbuf_kb);
    ls_sink_meta(r, "blocking_detection", "%s", r->no_blocking ? "off" : "on");
    ls_sink_meta(r, "syscalls", "%s", r->syscalls ? "on" : "off");
    ls_sink_meta(r, "block_threshold_ns", "%lld",
                  (long long)(r->block_threshold_ms * 1e6));
    ls_sink_meta(r, "start_ns", "%lld", (long long)r->start_ns);
    if (r->max_size)
        ls_sink_meta(r, "max_size", "%llu", (unsigned long long)r->max_size);
    if (r->backlog.limit)
        ls_sink_meta(r, "backlog_limit", "%llu", (unsigned long long)r->backlog.limit);
    /* A flight trace starts before it is written: the wall time of start_ns. */
    time_t now = time(NULL) - (time_t)((ls_now() - r->start_ns) / 1000000000ll);
    char iso[64];
    strftime(iso, sizeof(iso), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    ls_sink_meta(r, "start_utc", "%s", iso);
}

void ls_write_end_meta(recorder *r, const char *why)
{
    int64_t end = r->end_ns;          /* the derivation's end too (a flight trace: its window's) */
    time_t now = time(NULL) - (time_t)((ls_now() - end) / 1000000000ll);
    char iso[64];
    strftime(iso, sizeof(iso), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    ls_sink_meta(r, "end_ns", "%lld", (long long)end);
    ls_sink_meta(r, "end_utc", "%s", iso);
    ls_sink_meta(r, "duration_ns", "%lld", (long long)(end - r->start_ns));
    ls_sink_meta(r, "stop_reason", "%s", why);
    /* Counted by the kernel or by the recorder (SCHEMA.md), except
     * *_claimed: the target's own word, stored as such. */
    ls_sink_meta(r, "batches", "%llu", (unsigned long long)ls_stat(r, LS_STAT_BATCHES));
    ls_sink_meta(r, "batches_kept", "%llu", (unsigned long long)r->refs);
    if (r->backlog.limit) {
        ls_sink_meta(r, "backlog_messages", "%llu", (unsigned long long)r->backlog.msgs);
        ls_sink_meta(r, "backlog_peak", "%llu", (unsigned long long)r->backlog.peak);
    }
    ls_sink_meta(r, "records", "%llu", (unsigned long long)r->records);
    if (r->capped_ns)
        ls_sink_meta(r, "messages_after_cap", "%llu", (unsigned long long)r->after_cap);
    ls_sink_meta(r, "dropped_messages", "%llu",
                  (unsigned long long)ls_stat(r, LS_STAT_DROPPED_MSGS));
    ls_sink_meta(r, "dropped_bytes", "%llu",
                  (unsigned long long)ls_stat(r, LS_STAT_DROPPED_BYTES));
    ls_sink_meta(r, "dropped_events_claimed", "%llu",
                  (unsigned long long)ls_stat(r, LS_STAT_CLAIMED_DROPPED));
    ls_sink_meta(r, "rejected_records", "%llu", (unsigned long long)r->rejected);
    ls_sink_meta(r, "rejected_messages", "%llu", (unsigned long long)r->rejected_msgs);
    ls_sink_meta(r, "untracked_tasks", "%llu", (unsigned long long)r->untracked);
    ls_sink_meta(r, "snapshot_request_failures", "%llu",
                  (unsigned long long)r->snapshot_fail);
    ls_sink_meta(r, "blocking_episodes", "%llu", (unsigned long long)r->blocks);
    ls_sink_meta(r, "lost_episodes", "%llu",
                  (unsigned long long)ls_stat(r, LS_STAT_LOST_EPISODES));
    if (!r->offline) {                /* prio.c: the recorder's own, not a flight trace's */
        ls_sink_meta(r, "recorder_priority", "%s",
                      ls_prio_names[r->prio.used ? LS_PRIO_IDLE
                                    : r->prio.batch ? LS_PRIO_BATCH : LS_PRIO_NORMAL]);
        if (r->prio.used)
            ls_sink_meta(r, "priority_raises", "%llu",
                          (unsigned long long)atomic_load(&r->prio.raises));
    }
    if (r->generic)
        ls_sink_meta(r, "untracked_wait_calls", "%llu",
                      (unsigned long long)ls_stat(r, LS_STAT_UNTRACKED_WAITS));
    ls_sink_meta(r, "read_errors", "%llu",
                  (unsigned long long)(ls_stat(r, LS_STAT_READ_ERRORS) + r->ref_fail));
    if (!r->generic)
        ls_sink_meta(r, "loop_lost_records_claimed", "%llu",
                      (unsigned long long)ls_loop_lost(r));
    uint64_t unnamed = 0, jit = r->generic && r->syms ? ls_syms_jit_frames(r->syms, &unnamed) : 0;
    if (jit) {
        /* JIT code in the stacks (Node.js): named from its perf map, if
         * the target writes one (tracer/JIT.md). */
        const char *hint = !unnamed ? ""
                           : ls_syms_has_perfmap(r->syms) ? " (not in the perf map)" : LS_JIT_HINT;
        ls_sink_meta(r, "jit_symbols", "%s; %llu of %llu JIT frames unnamed%s",
                      ls_syms_perfmap_status(r->syms), (unsigned long long)unnamed,
                      (unsigned long long)jit, hint);
        if (unnamed && !r->quiet && !ls_syms_has_perfmap(r->syms))
            fprintf(stderr, "JS frames: %llu of %llu unnamed%s\n", (unsigned long long)unnamed,
                    (unsigned long long)jit, hint);
    }
}
