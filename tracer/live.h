/*
 * live.h -- the recorder as a live source (`loopscope top`): the same
 * attach / poll / detach lifecycle as `loopscope record` (engine.c), with
 * a trace file or none, and hooks called from its one thread as messages
 * are ingested.
 *
 * Every hook runs on the recorder's thread, from inside the ring-buffer
 * drain (or, for tick and stopped, from its main loop), so a hook must be
 * quick and must not call back into the recorder.  Strings passed to a
 * hook are the target's bytes (names) or symbols of its files: valid only
 * during the call, never escaped, never trusted.  Any hook may be NULL.
 */
#ifndef LOOPSCOPE_LIVE_H
#define LOOPSCOPE_LIVE_H

#include "replay.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A blocking episode, as stored (ls_store_blocking): its task (0: a
 * callback, or in the generic mode no asyncio task), kind (enum
 * ls_blocking_kind, model/codes.h), the syscall it slept in (-1: none),
 * and the innermost application frame of its stack (function, file may be
 * NULL; line 0 when unknown): the frame `loopscope blocking` calls its
 * site (not in libc, libevl's internals or, in the generic mode, the
 * runtime). */
typedef struct ls_live_block {
    uint64_t loop, task;
    int kind;
    int64_t syscall;
    const char *syscall_name; /* its name on this architecture, NULL if unknown */
    int64_t start, dur;
    const char *task_name;    /* generic mode: the asyncio task's name, else NULL */
    const char *function, *file;
    int line;
} ls_live_block;

/* Generic mode: a window of a loop thread's iterations (loop = its tid),
 * summed in BPF (tracer/README.md): hist[b] iterations whose busy time was
 * in [2^b, 2^(b+1)) ns (b = 0: 0 or 1 ns). */
typedef struct ls_live_window {
    uint64_t loop;
    int64_t start, end;
    uint64_t iterations, wait_ns, busy_ns, max_busy_ns;
    const uint32_t *hist;
    int nbuckets;
} ls_live_window;

/* What the recorder knows now, for the periodic tick. */
typedef struct ls_live_status {
    pid_t pid;
    const char *binary;       /* the target's executable (or the file holding the probes) */
    bool generic;             /* the generic loop mode: no task lifecycle */
    int64_t start_ns, now;    /* CLOCK_MONOTONIC, like every time here */
    size_t nloops;
    uint64_t tasks_created, tasks_finished, records, blocks;
    uint64_t dropped;         /* ring buffer messages lost (the kernel's count) */
    uint64_t rejected;        /* malformed records and messages refused */
    uint64_t untracked;       /* tasks beyond the replay's table: no stats */
    ls_replay *replay;        /* the live tasks: ls_replay_each_task (read only) */
} ls_live_status;

typedef struct ls_live_hooks {
    /* A task_create record was accepted (or a pre-existing task's, at
     * attach): its name, len bytes of anything (cut at EVL_NAME_MAX - 1). */
    void (*task_created)(void *ctx, uint64_t loop, uint64_t task, const char *name,
                         size_t len, bool preexisting);
    /* A lifecycle record was accepted and fed to the replay (loop_start
     * and loop_stop are not records: not reported). */
    void (*event)(void *ctx, const ls_event *e);
    /* A task finished (its final statistics in t, t->state is no longer
     * meaningful), or, with finished false, the recording ended with it
     * unfinished.  t is valid only during the call. */
    void (*task_done)(void *ctx, const ls_task *t, bool finished);
    /* A blocking episode was stored. */
    void (*block)(void *ctx, const ls_live_block *b);
    /* Generic mode: a window of iterations arrived. */
    void (*window)(void *ctx, const ls_live_window *w);
    /* About every LS_LIVE_TICK_NS from the main loop: non-zero stops the
     * recording (then detached and finished as on Ctrl-C). */
    int (*tick)(void *ctx, const ls_live_status *s);
    /* The main loop ended (before detaching): what it knew last, and
     * why, e.g. "target exited". */
    void (*stopped)(void *ctx, const ls_live_status *s, const char *why);
    void *ctx;
} ls_live_hooks;

#define LS_LIVE_TICK_NS 100000000ll

/* How to record.  out NULL: no trace file (nothing written anywhere);
 * otherwise exactly what `loopscope record -o out` writes (its meta
 * recorder_cmdline is argv). */
typedef struct ls_live_opts {
    pid_t pid;
    const char *out;
    bool force;
    double duration;          /* seconds, 0 = until stopped */
    double block_threshold_ms;/* 0: record's default */
    int mode;                 /* 0 auto, 1 libevl, 2 generic */
    int argc;
    char **argv;
} ls_live_opts;

/* Attach to o->pid, call the hooks until a hook's tick, SIGINT/SIGTERM,
 * the duration or the target's exit stops it, detach (the target's probe
 * semaphores drop to 0), finish the trace if any.  Returns the exit
 * status: 0, or non-zero after one "error: ..." line on stderr (bad pid,
 * no privileges, no access ...). */
int ls_live_run(const ls_live_opts *o, const ls_live_hooks *h);

#endif /* LOOPSCOPE_LIVE_H */
