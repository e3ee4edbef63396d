/*
 * recorder.h -- private to `loopscope record` (record.c, target.c,
 * attach.c, ingest.c, blocks.c, meta.c): the recorder's state and the
 * functions these files share.  Which file does what: tracer/README.md.
 */
#ifndef LOOPSCOPE_RECORDER_H
#define LOOPSCOPE_RECORDER_H

#include "error.h"
#include "record.h"
#include "record.skel.h"
#include "pystack.h"
#include "store.h"
#include "symbols.h"
#include "derive.h"
#include "replay.h"

#include <bpf/libbpf.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>


#define LS_MAX_LINKS 32
#define LS_MAX_LOOP_THREADS 64
#define LS_MAX_DEPTH 64
#define LS_STACK_IDS 4096         /* distinct stacks remembered for dedup */
#define LS_MAX_LOOPS 1024         /* loop ids accepted per recording */
#define LS_MIN_RINGBUF_KB 256     /* room for a few full batches (64 KiB each) */
#define LS_WINDOW_NS 20000000ull  /* generic mode: iterations summed per 20 ms */
#define LS_JIT_HINT "; start node with --perf-basic-prof --interpreted-frames-native-stack " \
                    "to name them"
#define LS_EPOLL_CALLS 3          /* generic mode: epoll_wait, epoll_pwait, epoll_pwait2 */

typedef struct recorder {
    /* options */
    pid_t pid;
    const char *out;
    double duration;          /* seconds, 0 = until stopped */
    bool force;
    bool no_batch;
    enum { LS_MODE_AUTO, LS_MODE_LIBEVL, LS_MODE_GENERIC } mode;
    bool wait_all;            /* --wait-calls all: poll/select loops too */
    bool wait_raw;            /* --wait-hook raw: raw sys_enter/sys_exit */
    bool quiet;
    unsigned ringbuf_kb;
    double block_threshold_ms;
    bool no_blocking;
    bool syscalls;
    char **cmd;               /* -- CMD ARGS */
    /* state */
    char binary[PATH_MAX];    /* the ELF file holding the evl probes, or
                               * in generic mode the target's executable */
    bool generic;             /* recording in the generic loop mode */
    char runtime[128];        /* what the target runs on (meta.runtime) */
    struct record_bpf *skel;
    struct bpf_link *links[LS_MAX_LINKS];
    int nlinks;
    struct ring_buffer *rb;
    ls_store *store;
    ls_syms *syms;
    ls_py *py;                /* generic mode, a CPython target: its stacks */
    int pidfd;
    pid_t child;              /* started by us (-- CMD) */
    int go_pipe;              /* write end: releases the child to exec */
    uint64_t tasks_created, tasks_finished;
    struct ls_loop_info {
        uint64_t id;          /* a loop with a row already */
        int64_t stopped;      /* loop_stop time, 0 while running */
        int64_t last_ts;      /* its newest accepted record: records of a
                               * loop never go back in time */
        bool snapshot_asked;  /* a snapshot was requested (or not needed) */
        uint64_t hist[LS_HIST_BUCKETS];     /* generic: iteration latency */
        uint64_t hist_ns[LS_HIST_BUCKETS];  /* and the busy time in each bucket */
    } *loops;
    size_t nloops, loops_cap;
    uint32_t sampled_tids[LS_MAX_LOOP_THREADS]; /* loop threads with a cpu sampler */
    struct bpf_link *samplers[LS_MAX_LOOP_THREADS];
    int nsampled;
    struct { uint64_t hash; int64_t id; } stack_ids[LS_STACK_IDS];
    int64_t next_stack_id;
    uint64_t blocks;
    int64_t attach_ns;        /* before the first probe was attached */
    int64_t start_ns;
    int64_t end_ns;           /* when recording stopped (open spans end there) */
    int64_t detach_ns;        /* when the programs were detached */
    bool target_gone;
    int64_t consume_until;    /* ls_on_msg yields back to the main loop then */
    unsigned since_check;
    ls_replay *replay;        /* the one replay of task states (model/replay.h) */
    ls_derive *derive;        /* writes what it derives (model/derive.h) */
    /* What the recorder itself counted (meta): */
    uint64_t records;         /* records accepted */
    uint64_t rejected;        /* records refused as malformed (bad size,
                               * kind, state, task id, time) */
    uint64_t rejected_msgs;   /* messages refused (loops over LS_MAX_LOOPS) */
    uint64_t untracked;       /* tasks beyond LS_TASKS_MAX: no task_stats */
    uint64_t snapshot_fail;   /* snapshot requests that could not be written */
} recorder;

/* record.c: the command and its lifecycle (errors: ls_error, model/error.h) */
int64_t ls_now(void);
uint64_t ls_stat(recorder *r, enum ls_stat k);

/* target.c: the target, its probes, runtime and our privileges */
int ls_find_probes(recorder *r);
int ls_check_privileges(void);
int ls_check_target_access(pid_t pid);
int ls_spawn(recorder *r);
void ls_child_runs(recorder *r);
void ls_detect_runtime(recorder *r, bool running);
void ls_find_waiting_threads(recorder *r);

/* attach.c: which programs load, attaching them */
void ls_choose_programs(recorder *r);
int ls_attach_all(recorder *r);

/* ingest.c: messages from the ring buffer: loops, records, tasks, windows */
int ls_on_msg(void *ctx, void *data, size_t size);
int ls_consume(recorder *r, int64_t budget_ns);
struct ls_loop_info *ls_loop_seen(recorder *r, uint64_t loop, uint32_t pid, uint32_t tid,
                                  int64_t ts);
ls_syms *ls_get_syms(recorder *r);
/* What a task's tasks row holds so far (ls_task.user). */
enum ls_task_row {
    LS_ROW_NONE = 0,
    LS_ROW_PLACEHOLDER = 1,   /* seen before its creation: name '?' */
    LS_ROW_CREATED = 2,       /* its task_create (or snapshot) is stored */
};
ls_task *ls_task_seen(recorder *r, uint64_t loop, uint64_t id);
void ls_task_row(recorder *r, ls_task *a, uint64_t loop, uint64_t id);
void ls_flush_windows(recorder *r);

/* blocks.c: blocking episodes, their stacks, the on-CPU samplers */
void ls_sample_thread(recorder *r, uint32_t tid);
void ls_on_block(recorder *r, const struct ls_msg_hdr *h);
void ls_map_each(recorder *r, struct bpf_map *map,
                 void (*fn)(recorder *r, uint32_t key, void *value));
void ls_flush_open_episodes(recorder *r);
void ls_store_syscalls(recorder *r);

/* meta.c: what the trace says about its recording */
void ls_write_meta(recorder *r, int argc, char **argv);
void ls_write_end_meta(recorder *r, const char *why);

#endif /* LOOPSCOPE_RECORDER_H */
