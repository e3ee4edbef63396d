/*
 * replay.h -- the one replay of task states.
 *
 * Every view of a trace that needs to know what a task was doing when --
 * the recorder's per-task accounting (task_stats), the derived tables
 * (transitions, iteration_hist; model/derived.sql), the timeline, the
 * Perfetto export, the lifecycle graph, lint -- feeds lifecycle events to
 * this state machine and reads what it reports.  The rules live here only:
 *
 *   task_create   -> created (ready to run; pre-existing tasks: state unknown
 *                    until their first event, which tells: a run means it was
 *                    ready, anything else that it was suspended)
 *   task_run      -> running           (a step; ends at the task's next event)
 *   task_suspend  -> suspended(reason, object)
 *   task_wake     -> ready(waker kind, waker task)
 *   task_finish   -> finished | failed | cancelled (terminal)
 *   task_cancel   -> a request: no state change, reported as a mark
 *   task_leak     -> a verdict: no state change, reported as a mark
 *
 * Events must come in the order the loop made them: per task in (ts, rowid)
 * order -- which the events table's rowid order is, and what the recorder
 * sees.  Tasks are independent, so any interleaving of tasks works.
 *
 * Memory: one entry per task that has not finished (model/tasks.h), at most
 * max_live of them (further tasks get no spans or stats; the recorder
 * counts them, meta untracked_tasks).  A finished task's entry is released once
 * on_task_done has run.
 */
#ifndef LS_MODEL_REPLAY_H
#define LS_MODEL_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "evl-probes.h"
#include "tasks.h"

/* One event, as the events table stores it (tracer/SCHEMA.md). */
typedef struct ls_event {
    int64_t ts;
    uint64_t loop;
    uint64_t task;        /* 0 for loop-level events */
    int kind;             /* enum evl_probe_id */
    int64_t reason;       /* suspend reason / waker kind / state / leak kind /
                             nevents; task_create: 1 if pre-existing */
    int64_t arg0, arg1;
    int64_t rowid;        /* its rowid in events, 0 if not known */
} ls_event;

/* The lifecycle node a task entered with an event (derived.sql): 100 * kind
 * + detail.  0 is "the end of the recording". */
enum {
    LS_NODE_END = 0,
    LS_NODE_CREATED = 100 * EVL_PROBE_ID_task_create,
    LS_NODE_PREEXISTING = 100 * EVL_PROBE_ID_task_create + 1,
    LS_NODE_RUNNING = 100 * EVL_PROBE_ID_task_run,
    LS_NODE_SUSPENDED = 100 * EVL_PROBE_ID_task_suspend,   /* + reason */
    LS_NODE_READY = 100 * EVL_PROBE_ID_task_wake,
    LS_NODE_FINAL = 100 * EVL_PROBE_ID_task_finish,        /* + final state */
    LS_NODE_LEAKED = 100 * EVL_PROBE_ID_task_leak,
};
/* Details outside 0..LS_NODE_DETAIL_MAX (a damaged or forged trace) become
 * LS_NODE_UNKNOWN_DETAIL, so a node always indexes an array of 1000. */
#define LS_NODE_DETAIL_MAX 63
#define LS_NODE_UNKNOWN_DETAIL 99

/* A state a task was in, from start to end. */
typedef struct ls_span {
    uint64_t task, loop;
    int state;            /* EVL_FINAL_CREATED, _READY, _RUNNING, _SUSPENDED (the
                             state enum of evl-probes.h is named EVL_FINAL_) */
    int node;             /* the lifecycle node it entered (LS_NODE_*) */
    int64_t detail;       /* suspended: suspend reason; ready: waker kind;
                             created: 1 if pre-existing (state guessed) */
    int64_t object;       /* suspended: what it waits on (task_suspend arg0);
                             ready: the waker task (0: none) */
    int64_t timeout;      /* suspended: task_suspend arg1 */
    int64_t start, end;
    int end_kind;         /* the event that ended it; 0: the recording or
                             its loop ended first */
    int64_t end_reason;   /* that event's reason (e.g. the final state) */
    int64_t end_arg0;     /* and arg0 (task_finish: the error) */
} ls_span;

typedef struct ls_replay ls_replay;

typedef struct ls_replay_ops {
    /* A span ended (spans of one task arrive in order).  May be NULL. */
    void (*on_span)(void *ctx, const ls_span *s);
    /* A task finished (or the replay ended with it unfinished: finished
     * false); its entry holds the final stats.  An unfinished task that
     * was never in a state (t->seen 0: only a mark, e.g. a leak verdict
     * or a cancel named it) has no stats of its own: its id may be a task
     * that finished earlier.  May be NULL. */
    void (*on_task_done)(void *ctx, const ls_task *t, bool finished);
    /* task_cancel and task_leak, as they come.  May be NULL. */
    void (*on_mark)(void *ctx, const ls_event *e);
    void *ctx;
    /* Spans and stats only: no transition or iteration aggregates (for
     * readers that do not use them: they cost a hash lookup per event). */
    bool spans_only;
} ls_replay_ops;

/* NULL when out of memory.  max_live 0 means LS_TASKS_MAX. */
ls_replay *ls_replay_new(const ls_replay_ops *ops, size_t max_live);
void ls_replay_free(ls_replay *r);

/* Feed one event (any kind; loop events feed the iteration statistics). */
void ls_replay_event(ls_replay *r, const ls_event *e);

/* Loop `loop` stopped at ts: its tasks' open spans end there. */
void ls_replay_loop_stop(ls_replay *r, uint64_t loop, int64_t ts);

/* The end of the recording: every open span ends at end_ns (or at its
 * loop's stop), on_task_done runs for each unfinished task.  Call once. */
void ls_replay_end(ls_replay *r, int64_t end_ns);

/* Call fn on every task the replay holds (live ones, and finished ones
 * kept for a verdict: t->done), in no particular order; for live views
 * (`loopscope top`).  fn must not feed the replay. */
void ls_replay_each_task(ls_replay *r, void (*fn)(const ls_task *t, void *ctx), void *ctx);

/* The aggregates, for model/derive.c: visit every transition edge and
 * histogram bucket, and every loop's iteration histogram. */
typedef struct ls_edge_stats {
    uint64_t loop;
    int from, to;
    uint64_t count;
    int64_t total_ns, max_ns;
} ls_edge_stats;
void ls_replay_each_edge(ls_replay *r,
                         void (*edge)(void *ctx, const ls_edge_stats *e),
                         void (*bucket)(void *ctx, const ls_edge_stats *e, int64_t lo,
                                        int64_t hi, uint64_t count),
                         void *ctx);
void ls_replay_each_iteration_bucket(ls_replay *r,
                                     void (*bucket)(void *ctx, uint64_t loop, int64_t lo,
                                                    int64_t hi, uint64_t count, int64_t busy),
                                     void *ctx);

/* b - a, saturated: times come from a trace, which may hold anything. */
static inline int64_t ls_ns_sub(int64_t b, int64_t a)
{
    int64_t d;
    if (__builtin_sub_overflow(b, a, &d))
        d = b > a ? INT64_MAX : INT64_MIN;
    return d;
}

/* The bucket of a duration in the transition histograms: [lo, hi), eight
 * per power of two (exact below 8 ns).  Shared so readers can interpret
 * the rows and percentiles stay within 1/8 of a power of two. */
void ls_hist_bucket(int64_t ns, int64_t *lo, int64_t *hi);
/* The same buckets numbered: ns's bucket (0 .. 487; 0 for ns < 0), and
 * bucket i's bounds [lo, hi), for readers keeping such a histogram. */
int ls_hist_index(int64_t ns);
void ls_hist_bounds(int i, int64_t *lo, int64_t *hi);

#endif
