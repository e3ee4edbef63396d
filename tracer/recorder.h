/*
 * recorder.h -- private to the recorder's files (tracer/README.md's table
 * says which does what): struct recorder -- the options, a pointer to each
 * stage of the pipeline (ARCHITECTURE.md, "The recorder's pipeline"), the
 * loop table and the counters the meta rows report -- and the functions
 * the files share.
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
#include "meta.h"              /* model/meta.h: the meta keys */
#include "replay.h"
#include "live.h"
#include "sink.h"
#include "decode.h"
#include "hold.h"

#include <bpf/libbpf.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>


#define LS_MAX_LINKS 32
#define LS_MEMBER_EPISODES 16     /* a group member's open episodes (engine.c) */
#define LS_MAX_DEPTH 64
#define LS_STACK_IDS 4096         /* distinct stacks remembered for dedup */
#define LS_MAX_LOOPS 1024         /* loop ids accepted per recording */
#define LS_MIN_RINGBUF_KB 256     /* room for a few full batches (64 KiB each) */
#define LS_WINDOW_NS 20000000ull  /* generic mode: iterations summed per 20 ms */
#define LS_JIT_HINT "; start node with --perf-basic-prof --interpreted-frames-native-stack " \
                    "to name them"
#define LS_EPOLL_CALLS 3          /* generic mode: epoll_wait, epoll_pwait, epoll_pwait2 */

/* Generic mode: which calls are a loop's waits (--wait-calls). */
enum {
    LS_WAIT_AUTO = 0,         /* epoll_*; poll and select on threads that never call epoll_* */
    LS_WAIT_EPOLL = 1,        /* epoll_* only */
    LS_WAIT_ALL = 2,          /* epoll_*, poll and select on every thread */
};

/* Generic mode: how the wait calls are seen (--wait-hook; tracer/README.md,
 * "Seeing the wait calls"). */
enum {
    LS_HOOK_TRACEPOINT = 0,   /* their syscall tracepoints: every call */
    LS_HOOK_RAW = 1,          /* raw sys_enter/sys_exit: every call */
    LS_HOOK_SWITCH = 2,       /* sched_switch: the calls that sleep (the agent's default) */
};

struct ls_flight;

/* prio.c: --priority; idle is the recorder's thread as SCHED_IDLE, raised
 * when starved; batch is SCHED_BATCH for the recording */
enum { LS_PRIO_NORMAL, LS_PRIO_IDLE, LS_PRIO_BATCH };
extern const char *const ls_prio_names[3];
typedef struct ls_prio {
    pid_t tid;
    pthread_t watchdog;
    pthread_mutex_t mu;       /* policy changes, from either thread */
    const uint64_t *cons, *prod;  /* the ring's positions (mapped), or NULL */
    uint64_t ring_bytes;
    bool started;             /* the watchdog runs (until ls_prio_stop) */
    bool used;                /* SCHED_IDLE ran during this recording */
    bool batch;               /* SCHED_BATCH ran during this recording */
    bool batch_set;           /* and is set (until ls_prio_stop) */
    _Atomic bool idle, stop;
    _Atomic uint64_t beat;    /* the main loop's turns */
    _Atomic uint64_t raises;  /* times the watchdog raised it */
    _Atomic int64_t raised_at;
    _Atomic bool kept;        /* the target keeps its batches until read (ingest.c) */
} ls_prio;

typedef struct recorder {
    /* options */
    pid_t pid;
    const char *out;
    const char *metrics_addr;   /* --metrics [HOST:]PORT, or NULL */
    double duration;          /* seconds, 0 = until stopped */
    bool force;
    bool no_batch;
    enum { LS_MODE_AUTO, LS_MODE_LIBEVL, LS_MODE_GENERIC } mode;
    int wait_calls;           /* --wait-calls: LS_WAIT_AUTO (default), _EPOLL, _ALL */
    int wait_hook;            /* --wait-hook: LS_HOOK_TRACEPOINT (default), _RAW, _SWITCH */
    bool quiet;
    unsigned ringbuf_kb;
    bool ringbuf_given;       /* --ringbuf-kb was given (a group's members take less) */
    double block_threshold_ms;
    bool no_blocking;
    bool syscalls;
    char **cmd;               /* -- CMD ARGS */
    bool threshold_given;     /* -t was given (a blocking trigger lowers it otherwise) */
    uint64_t max_size;        /* --max-size: bytes, 0 = no cap */
    /* --flight-recorder (flight.c): keep the last flight_window_ns in memory,
     * write a trace per trigger; 0 = off */
    int64_t flight_window_ns, flight_tail_ns;
    bool flight_live;         /* and decode everything as it comes too (the agent's
                               * members, for their metrics: group.c) */
    uint64_t flight_memory;   /* --flight-memory: bytes */
    int64_t trig_block_ns;    /* --trigger blocking>=X: X, 0 = none */
    bool trig_leak;           /* --trigger leak */
    int argc;                 /* the command line, for meta recorder_cmdline */
    char **argv;
    void (*on_status)(struct recorder *r, int64_t now);  /* the status line, about every
                                                          * second on a terminal (cmd_record.c) */
    /* state */
    struct ls_flight *flight; /* the flight recorder's ring and tasks, NULL if off */
    /* A flight trace being written (flight.c) is a recorder of its own with
     * the same options, fed from the ring: offline (it never touches the
     * target: no snapshot request, no sampler, no BPF map), its attach
     * state (symbols) borrowed from parent. */
    bool offline;
    struct recorder *parent;
    int64_t rec_until;        /* offline: records after it are left out (0: none) */
    char binary[PATH_MAX];    /* the ELF file holding the evl probes, or
                               * in generic mode the target's executable */
    const ls_decoder *dec;    /* the mode's decoder (decode.h), chosen by target.c */
    char runtime[128];        /* what the target runs on (meta.runtime) */
    struct record_bpf *skel;
    struct bpf_link *links[LS_MAX_LINKS];
    int nlinks;
    struct ring_buffer *rb;
    ls_store *store;
    ls_syms *syms;
    ls_py *py;                /* generic mode, a CPython target: its stacks */
    struct ls_asyncio *asyncio; /* and its task census (decode_asyncio.c) */
    int census_ms;            /* --census-ms */
    int task_probe_rate;      /* --task-probe-rate: tasks made a second the probes stay for */
    bool priority_given;      /* --priority was given */
    bool no_tasks;            /* --no-tasks: no census (blocking episodes only) */
    bool asyncio_refused;     /* the census cannot read this CPython: said once */
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
        uint64_t pub;         /* its evl_loop_pub address, as its batches say */
        uint32_t pid, tid;    /* as its first message said */
        int64_t seen;         /* that message's time */
        /* flight recorder: an on-CPU episode shorter than the blocking
         * trigger so far, watched while its step (pub.steps) runs */
        uint32_t oncpu_steps;
        int64_t oncpu_start;  /* 0: none watched */
        uint64_t oncpu_task;
        uint32_t flush_req;   /* ls_flush_loops: the snapshot it asked for */
        /* evl_loop_pub.lost when first seen and when last read (the
         * target's word; ls_flush_loops reads it at the end) */
        uint32_t lost0, lost;
        bool reader;          /* we told it we read kept batches (evl_loop_pub.reader) */
        uint64_t hist[LS_HIST_BUCKETS];     /* generic: iteration latency */
        uint64_t hist_ns[LS_HIST_BUCKETS];  /* and the busy time in each bucket */
    } *loops;
    size_t nloops, loops_cap;
    uint32_t poll_loops;      /* generic: loop threads at the end that waited in poll or
                               * select, never in epoll_* (decode_generic.c's flush) */
    struct ls_blocks *blk;    /* blocks.c's: the samplers, the stacks stored */
    uint64_t blocks;
    bool trace_done;          /* ls_recorder_stop finished the trace */
    int64_t attach_ns;        /* before the first probe was attached */
    int64_t start_ns;
    int64_t end_ns;           /* when recording stopped (open spans end there) */
    int64_t detach_ns;        /* when the programs were detached */
    bool target_gone;
    int64_t consume_until;    /* ls_on_msg yields back to the main loop then */
    bool consuming;           /* in ls_consume */
    /* --max-size reached: the trace ends here (end_ns), and no message
     * taken since is stored (counted in after_cap); 0 while under it */
    int64_t capped_ns;
    uint64_t after_cap;
    size_t since_check;       /* bytes consumed since the budget was checked */
    /* Which tasks have their tasks row (ls_task.user, enum ls_task_row):
     * an entry per task seen and not finished, at most LS_TASKS_MAX. */
    ls_tasks *rows;
    /* The last stage: the trace file (store, NULL when there is none;
     * the engine ticks, measures and finishes it) and `top`'s live view
     * (live.c, NULL for record), each a sink (sink.h). */
    ls_sink sinks[LS_MAX_SINKS];
    int nsinks;
    uint64_t nevents;         /* events handed to the sinks (rowids 1, 2 ...) */
    /* `loopscope top` (live.h): its hooks, NULL for record; its sink's state. */
    const ls_live_hooks *live;
    struct ls_live *live_state;
    struct ls_metrics *metrics;   /* --metrics: the endpoint and its sink (metrics.c) */
    /* A process group's member (group.c): one process of the group,
     * recorded on a thread of its own into the group's sinks; it watches
     * its forks and execs when watch_procs (--children). */
    struct ls_member *member;
    struct ls_group *group;   /* the group's own recorder: its members (group.c) */
    bool watch_procs;
    _Atomic bool stop_req;    /* the run loop stops at its next turn (why: stop_why) */
    const char *stop_why;
    /* What the recorder itself counted (meta): */
    uint64_t records;         /* records accepted */
    uint64_t rejected;        /* records refused as malformed (bad size,
                               * kind, state, task id, time) */
    uint64_t rejected_msgs;   /* messages refused (loops over LS_MAX_LOOPS) */
    uint64_t batches_in;      /* batch messages taken from the ring (engine.c's polling) */
    uint64_t untracked;       /* tasks created while rows was full */
    uint64_t snapshot_fail;   /* snapshot requests that could not be written */
    uint64_t ref_fail;        /* batches kept in the target that could not be read */
    uint64_t refs;            /* batches kept in the target, read (or not: ref_fail) */
    uint8_t *ref_buf;         /* such a batch, read: a message header + EVL_BATCH_BYTES */
    /* --backlog: bytes, 0 = store each message as it comes (backlog.c);
     * LOOPSCOPE_TEST_BACKLOG=hold: never time to spare (tests) */
    uint64_t backlog_limit;
    bool backlog_test_hold;
    /* The hold stage (hold.h), NULL if none; its state: */
    const ls_hold_ops *hold;
    struct ls_backlog *backlog;
    int priority;             /* --priority: LS_PRIO_IDLE (record's default), _BATCH
                               * (top's) or _NORMAL (prio.c) */
    ls_prio prio;
} recorder;

/* prio.c: SCHED_IDLE for thread tid with its watchdog, which watches the
 * ring buffer map ring (-1: unavailable, the thread keeps its policy); one
 * beat per turn of the main loop, caught_up
 * when the ring was emptied; normal again and the watchdog gone. */
int ls_prio_start(ls_prio *p, pid_t tid, const struct bpf_map *ring);
/* SCHED_BATCH for thread tid until ls_prio_stop: 0, or -1 (policy kept). */
int ls_prio_batch(ls_prio *p, pid_t tid);
void ls_prio_beat(ls_prio *p, bool caught_up);
void ls_prio_stop(ls_prio *p);

/* engine.c: the lifecycle (errors: ls_error, model/error.h).  open: the
 * target, the BPF programs loaded and attached, the trace; run: the main
 * loop until something stops it (*why); stop: detach, drain, finish the
 * trace (r->trace_done); free: everything, in any state.  Each returns 0
 * or non-zero after one error line. */
int ls_recorder_open(recorder *r);
int ls_recorder_run(recorder *r, const char **why);
int ls_recorder_stop(recorder *r, int err, const char *why);
void ls_recorder_free(recorder *r);
int64_t ls_now(void);
uint64_t ls_stat(recorder *r, enum ls_stat k);
/* --max-size: true once the trace has reached its cap (r->capped_ns set);
 * checked by ls_on_msg as messages are taken, and by the main loop. */
bool ls_max_size_reached(recorder *r);

/* target.c: the target, its probes, runtime and our privileges */
int ls_find_probes(recorder *r);
int ls_check_privileges(void);
int ls_check_target_access(pid_t pid);
int ls_spawn(recorder *r);
void ls_child_runs(recorder *r);
void ls_detect_generic_runtime(recorder *r, bool running);
void ls_find_waiting_threads(recorder *r);
int ls_thread_waits(pid_t pid, long tid, int wait_calls);
void ls_proc_comm(pid_t pid, char *comm, size_t len);

/* attach.c: which programs load, attaching them */
void ls_choose_programs(recorder *r, bool waits);
int ls_attach_all(recorder *r);
int ls_attach_evl(recorder *r);
int ls_attach_generic(recorder *r);

/* ingest.c: the pipeline's wiring: the source's callback for each
 * message (a kept batch read, then held or passed on), a message whose
 * time has come (into the flight recorder's capture, or decoded), the
 * common dispatch (loops, their end, blocking episodes; the rest to the
 * decoder); a kept batch read out of the target (NULL: not read,
 * counted); draining the ring for at most budget_ns (-1: the budget ran
 * out first); a loop's entry; the symbols, made at their first use. */
int ls_on_msg(void *ctx, void *data, size_t size);
void ls_take_msg(recorder *r, const void *data, size_t size);
const void *ls_read_ref(recorder *r, const void *data, size_t *size);
void ls_ingest_msg(recorder *r, const void *data, size_t size);
int ls_consume(recorder *r, int64_t budget_ns);
struct ls_loop_info *ls_loop_seen(recorder *r, uint64_t loop, uint32_t pid, uint32_t tid,
                                  int64_t ts);
ls_syms *ls_get_syms(recorder *r);

/* evl_target.c: libevl's published state in the target (evl_loop_pub).
 * A kept batch's reference (NULL: malformed, counted); reading it into m
 * (room for a header and its length; NULL: no memory) and releasing it. */
const struct ls_batch_ref *ls_batch_ref(recorder *r, const void *data, size_t size);
bool ls_read_batch(recorder *r, const struct ls_msg_hdr *h, const struct ls_batch_ref *b,
                   struct ls_msg_hdr *m);
/* A loop heard from (loop_start, or a batch): what it lost before us, we
 * read kept batches, the snapshot asked for the first time. */
void ls_loop_started(recorder *r, struct ls_loop_info *li, const struct ls_msg_hdr *h);
void ls_loop_batch(recorder *r, struct ls_loop_info *li, const struct ls_msg_hdr *h);
void ls_loop_contact(recorder *r, struct ls_loop_info *li, uint64_t pub, bool keepable);
bool ls_read_pub(recorder *r, uint64_t pub, struct evl_loop_pub *cur);
bool ls_write_pub(recorder *r, uint64_t pub, size_t off, const void *src, size_t n);
/* Before detaching: each loop hands over what it holds; leaving: the
 * loops told we read kept batches hand copies again; what the loops say
 * they dropped while we held every buffer. */
void ls_flush_loops(recorder *r);
void ls_loops_leave(recorder *r);
uint64_t ls_loop_lost(const recorder *r);
/* Batches whose records could not be read (meta read_errors): copies the
 * probe could not take, kept batches we could not (the target gone, or
 * lying about where they were). */
uint64_t ls_read_errors(recorder *r);

/* decode_evl.c: what a task's tasks row holds so far (ls_task.user). */
enum ls_task_row {
    LS_ROW_NONE = 0,
    LS_ROW_PLACEHOLDER = 1,   /* seen before its creation: name '?' */
    LS_ROW_CREATED = 2,       /* its task_create (or snapshot) is stored */
};

/* blocks.c: blocking episodes, their stacks, the on-CPU samplers */
void ls_start_samplers(recorder *r);
void ls_stop_samplers(recorder *r);
void ls_blocks_free(recorder *r);
void ls_on_block(recorder *r, const struct ls_msg_hdr *h);
int64_t ls_chain_stack(recorder *r, const struct ls_py_frame *f, uint32_t n);
void ls_map_each(recorder *r, struct bpf_map *map,
                 void (*fn)(recorder *r, uint32_t key, void *value));
void ls_flush_open_episodes(recorder *r);
void ls_flush_open_map(recorder *r, struct bpf_map *map);
void ls_store_syscalls(recorder *r);

/* decode_asyncio.c: the asyncio task lifecycle of a CPython target, from
 * a census of its tasks every census_ms (decode_generic.c calls these) */
void ls_asyncio_tick(recorder *r, int64_t now);
void ls_asyncio_msg(recorder *r, uint64_t ts, const struct ls_pytask_ev *e);
void ls_asyncio_detaching(recorder *r);
void ls_asyncio_end(recorder *r);
uint64_t ls_asyncio_task_id(recorder *r, uint64_t addr);
void ls_asyncio_meta(recorder *r);
void ls_asyncio_free(recorder *r);

/* live.c: `top`'s sink (r->live: its hooks), 0 or non-zero after one
 * error line. */
int ls_live_sink_add(recorder *r);
/* live.c, the live source's side: every
 * LS_LIVE_TICK_NS from the main loop (a hook may stop it); its end. */
void ls_live_tick(recorder *r, int64_t now, const char **why, bool *stop);
void ls_live_stopped(recorder *r, const char *why);

/* group.c: record a process group (cmd_record.c: -p PID,PID..., --children,
 * --cgroup, --comm) into r's trace: 0, or non-zero after one error line;
 * a member's fork or exec (LS_MSG_PROC, ingest.c). */
#define LS_SEL_MAX 16
struct ls_group_sel {
    pid_t *pids;
    int npids;
    bool children;
    const char *cgroup[LS_SEL_MAX];   /* cgroup directories (resolved by the group) */
    int ncgroup;
    const char *comm[LS_SEL_MAX];     /* process names (/proc/PID/comm) */
    int ncomm;
    bool loops;                       /* --loops: every process with a thread asleep in
                                       * a wait call (ls_thread_waits) */
    /* `loopscope agent` (cmd_record.c): no trace of its own; each process
     * a flight recorder writing into dir (COMM-PID-N.db), whose traces
     * stay under dir_cap bytes, oldest removed first; it waits while
     * nothing matches, and SIGHUP calls reload (0: the selection and the
     * options in r are the configuration's again). */
    const char *dir;
    uint64_t dir_cap;
    int (*reload)(struct recorder *r, struct ls_group_sel *sel);
};
int ls_group_record(recorder *r, struct ls_group_sel *sel, const char **why);
void ls_group_proc(recorder *r, uint32_t kind, uint32_t pid);
/* The recorders of r's processes: r itself, or a group's running members
 * (called with the group's lock held: its sinks' calls are); how many. */
int ls_recorder_procs(recorder *r, recorder **out, int max);

/* engine.c: finish a trace (end meta, the derived tables replayed from
 * its events, indexes) and close it; 0 or non-zero after one error line. */
int ls_output_finish(recorder *r, const char *why);

/* meta.c: what the trace says about its recording */
void ls_write_meta(recorder *r, int argc, char **argv);
void ls_write_end_meta(recorder *r, const char *why);
/* a meta key's value: the wall time (UTC, ISO 8601) of monotonic time ns;
 * end_ns, end_utc, duration_ns and stop_reason of a trace ending at r->end_ns */
void ls_sink_meta_utc(recorder *r, const char *key, int64_t ns);
void ls_write_span_meta(recorder *r, const char *why);

#endif /* LOOPSCOPE_RECORDER_H */
