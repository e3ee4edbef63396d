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
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "ls_schema.h"
#include "tracer.h"

void ls_sink_meta_utc(recorder *r, const char *key, int64_t ns)
{
    time_t wall = time(NULL) - (time_t)((ls_now() - ns) / 1000000000ll);
    char iso[64];
    strftime(iso, sizeof(iso), "%Y-%m-%dT%H:%M:%SZ", gmtime(&wall));
    ls_sink_meta(r, key, "%s", iso);
}

void ls_write_span_meta(recorder *r, const char *why)
{
    ls_sink_meta(r, LS_META_END_NS, "%lld", (long long)r->end_ns);
    ls_sink_meta_utc(r, LS_META_END_UTC, r->end_ns);
    ls_sink_meta(r, LS_META_DURATION_NS, "%lld", (long long)(r->end_ns - r->start_ns));
    ls_sink_meta(r, LS_META_STOP_REASON, "%s", why);
}

void ls_write_meta(recorder *r, int argc, char **argv)
{
    struct utsname u;
    uname(&u);
    ls_sink_meta(r, LS_META_TOOL, "loopscope %s", LOOPSCOPE_VERSION);
    ls_sink_meta(r, LS_META_SCHEMA_VERSION, "%d", LS_SCHEMA_VERSION);
    ls_sink_meta(r, LS_META_HOST, "%s", u.nodename);
    ls_sink_meta(r, LS_META_KERNEL, "%s %s", u.sysname, u.release);
    ls_sink_meta(r, LS_META_CLOCK, "CLOCK_MONOTONIC");
    ls_sink_meta(r, LS_META_TARGET_PID, "%d", r->pid);
    ls_sink_meta(r, LS_META_TARGET_BINARY, "%s", r->binary);
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
    ls_sink_meta(r, LS_META_TARGET_CMDLINE, "%s", buf);
    n = 0;
    for (int i = 0; i < argc && n < (ssize_t)sizeof(buf) - 1; i++)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "%s%s", i ? " " : "", argv[i]);
    ls_sink_meta(r, LS_META_RECORDER_CMDLINE, "%s", buf);
    r->dec->meta_start(r);            /* mode, and the mode's own */
    ls_sink_meta(r, LS_META_RUNTIME, "%s", r->runtime);
    ls_sink_meta(r, LS_META_RINGBUF_KB, "%u", r->ringbuf_kb);
    ls_sink_meta(r, LS_META_BLOCKING_DETECTION, "%s", r->no_blocking ? "off" : "on");
    ls_sink_meta(r, LS_META_SYSCALLS, "%s", r->syscalls ? "on" : "off");
    ls_sink_meta(r, LS_META_BLOCK_THRESHOLD_NS, "%lld",
                  (long long)(r->block_threshold_ms * 1e6));
    ls_sink_meta(r, LS_META_START_NS, "%lld", (long long)r->start_ns);
    if (r->max_size)
        ls_sink_meta(r, LS_META_MAX_SIZE, "%llu", (unsigned long long)r->max_size);
    if (r->hold && r->hold->meta_start)
        r->hold->meta_start(r);
    /* A flight trace starts before it is written: the wall time of start_ns. */
    ls_sink_meta_utc(r, LS_META_START_UTC, r->start_ns);
}

/* Runs of our programs the kernel skipped: a tracepoint or perf_event
 * program while another BPF program of those kinds ran on its CPU, a
 * tp_btf one re-entered (bpf_prog_info.recursion_misses).  An event in
 * one of those runs is not seen at all: a switch, a wait call's entry. */
static uint64_t missed_runs(recorder *r)
{
    uint64_t n = 0;
    struct bpf_program *prog;
    bpf_object__for_each_program(prog, r->skel->obj) {
        struct bpf_prog_info info = { 0 };
        uint32_t len = sizeof(info);
        int fd = bpf_program__fd(prog);
        if (fd >= 0 && bpf_obj_get_info_by_fd(fd, &info, &len) == 0)
            n += info.recursion_misses;
    }
    return n;
}

void ls_write_end_meta(recorder *r, const char *why)
{
    ls_write_span_meta(r, why);       /* end_ns: the derivation's end too (a flight
                                       * trace: its window's) */
    /* Counted by the kernel or by the recorder (SCHEMA.md), except
     * *_claimed: the target's own word, stored as such. */
    ls_sink_meta(r, LS_META_BATCHES, "%llu", (unsigned long long)ls_stat(r, LS_STAT_BATCHES));
    ls_sink_meta(r, LS_META_BATCHES_KEPT, "%llu", (unsigned long long)r->refs);
    if (r->hold && r->hold->meta_end)
        r->hold->meta_end(r);
    ls_sink_meta(r, LS_META_RECORDS, "%llu", (unsigned long long)r->records);
    if (r->capped_ns)
        ls_sink_meta(r, LS_META_MESSAGES_AFTER_CAP, "%llu", (unsigned long long)r->after_cap);
    ls_sink_meta(r, LS_META_DROPPED_MESSAGES, "%llu",
                  (unsigned long long)ls_stat(r, LS_STAT_DROPPED_MSGS));
    ls_sink_meta(r, LS_META_DROPPED_BYTES, "%llu",
                  (unsigned long long)ls_stat(r, LS_STAT_DROPPED_BYTES));
    ls_sink_meta(r, LS_META_DROPPED_EVENTS_CLAIMED, "%llu",
                  (unsigned long long)ls_stat(r, LS_STAT_CLAIMED_DROPPED));
    ls_sink_meta(r, LS_META_REJECTED_RECORDS, "%llu", (unsigned long long)r->rejected);
    ls_sink_meta(r, LS_META_REJECTED_MESSAGES, "%llu", (unsigned long long)r->rejected_msgs);
    ls_sink_meta(r, LS_META_UNTRACKED_TASKS, "%llu", (unsigned long long)r->untracked);
    ls_sink_meta(r, LS_META_SNAPSHOT_REQUEST_FAILURES, "%llu",
                  (unsigned long long)r->snapshot_fail);
    ls_sink_meta(r, LS_META_BLOCKING_EPISODES, "%llu", (unsigned long long)r->blocks);
    ls_sink_meta(r, LS_META_LOST_EPISODES, "%llu",
                  (unsigned long long)ls_stat(r, LS_STAT_LOST_EPISODES));
    ls_sink_meta(r, LS_META_UNSEEN_SWITCHES, "%llu",
                  (unsigned long long)ls_stat(r, LS_STAT_UNSEEN_SWITCHES));
    if (!r->offline && r->skel)
        ls_sink_meta(r, LS_META_MISSED_RUNS, "%llu", (unsigned long long)missed_runs(r));
    if (!r->offline) {                /* prio.c: the recorder's own, not a flight trace's */
        ls_sink_meta(r, LS_META_RECORDER_PRIORITY, "%s",
                      ls_prio_names[r->prio.used ? LS_PRIO_IDLE
                                    : r->prio.batch ? LS_PRIO_BATCH : LS_PRIO_NORMAL]);
        if (r->prio.used)
            ls_sink_meta(r, LS_META_PRIORITY_RAISES, "%llu",
                          (unsigned long long)atomic_load(&r->prio.raises));
    }
    ls_sink_meta(r, LS_META_READ_ERRORS, "%llu", (unsigned long long)ls_read_errors(r));
    r->dec->meta_end(r);
}
