/*
 * sink.h -- the last stage of the recorder's pipeline: where the model
 * records a decoder made go.  A sink is a table of functions and its
 * state; the recorder holds a list of them (r->sinks) and the decoders
 * hand every record to all of them through the ls_sink_* calls below, in
 * the order they were made.  The sinks today: the SQLite trace
 * (sink_store.c, over store.c), `loopscope top`'s live view (live.c),
 * Prometheus metrics (metrics.c, record --metrics), and a flight trace,
 * which is the store sink of a pipeline of its own (flight_write.c).  Adding one: ARCHITECTURE.md, "The recorder's
 * pipeline".
 *
 * Every function runs on the recorder's one thread; a process group's
 * sinks (group.c) are called from its members' threads, one at a time,
 * under the group's lock.  Strings are the
 * target's bytes (names) or symbols of its files, valid only during the
 * call; a sink copies what it keeps.  Any function may be NULL.
 */
#ifndef LOOPSCOPE_SINK_H
#define LOOPSCOPE_SINK_H

#include "record.h"
#include "replay.h"
#include "symbols.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct recorder;

/* A task_create record (or a pre-existing task's, from a snapshot). */
typedef struct ls_sink_task {
    uint64_t task, loop, parent;
    const char *name;         /* len bytes of anything */
    size_t len;
    const char *function;     /* its function's symbol, NULL if unknown */
    uint64_t fn_addr;
    int64_t created;
    bool preexisting;
} ls_task_rec;

/* A blocking episode, as decoded (model/codes.h, enum ls_blocking_kind). */
typedef struct ls_sink_block {
    uint64_t loop, task;      /* task 0: a callback, or no task known */
    int kind;
    int64_t syscall;          /* -1: none */
    int64_t start, dur;
    int64_t stack;            /* its stack id (0: none), frames already given */
    const char *task_name;    /* generic mode: the asyncio task's name, else NULL */
} ls_block_rec;

/* A process of a group (group.c; the processes table, tracer/SCHEMA.md):
 * given when it is attached and again when it ends. */
typedef struct ls_sink_proc {
    uint32_t id;              /* its place in the group: ids + (id << 40) */
    uint32_t pid, parent;     /* parent 0: selected, not forked */
    const char *binary, *mode, *runtime;   /* NULL: not known (yet) */
    int64_t attached, ended;  /* ended 0: still recorded */
    const char *end_reason;
} ls_proc_rec;

typedef struct ls_sink_ops {
    const char *name;
    /* How the trace was recorded, what was counted: a meta row. */
    void (*meta)(void *s, const char *key, const char *value);
    void (*process)(void *s, const ls_proc_rec *p);
    void (*loop)(void *s, uint64_t loop, uint32_t pid, uint32_t tid, int64_t seen);
    void (*loop_stop)(void *s, uint64_t loop, int64_t stopped);
    void (*task)(void *s, const ls_task_rec *t);
    /* A task seen without its creation: a row named '?', unless it has one. */
    void (*task_unknown)(void *s, uint64_t task, uint64_t loop);
    /* Generic mode: a task known only by its name (an asyncio Task). */
    void (*task_named)(void *s, uint64_t task, uint64_t loop, const char *name, size_t len);
    void (*task_leak)(void *s, uint64_t task, int kind);
    void (*task_finish)(void *s, uint64_t task, uint64_t loop, int64_t ended, int state,
                        int64_t error);
    /* An event row (a lifecycle record; loop_start and loop_stop), in the
     * order the loop made them; e->rowid is its place among all events. */
    void (*event)(void *s, const ls_event *e);
    /* Generic mode: a window of a loop thread's iterations; at the end, a
     * bucket of its iteration histogram. */
    void (*window)(void *s, uint64_t loop, const struct ls_window *w);
    void (*hist)(void *s, uint64_t loop, int64_t lo, int64_t hi, uint64_t count,
                 uint64_t busy_ns);
    /* A new stack: its frames from depth 0 (innermost), then its depth;
     * app: the frame is the application's, by its decoder's rule
     * (decode.h, app_frame), not a library's or the runtime's. */
    void (*frame)(void *s, int64_t stack, int depth, uint64_t pc, const ls_sym *f, bool app);
    void (*stack)(void *s, int64_t stack, int depth);
    void (*block)(void *s, const ls_block_rec *b);
    /* Asyncio traces: a task's await chain (a stack given before) when a
     * census saw it park at ts (its task_suspend event's time). */
    void (*await_stack)(void *s, uint64_t task, int64_t ts, int64_t stack);
    void (*syscall_stat)(void *s, uint64_t loop, uint32_t tid, uint32_t nr, uint64_t count,
                         uint64_t total_ns, uint64_t max_ns);
    /* Everything is in (open spans end at end_ns): 0, or -1 after one
     * error line.  The sink's state goes with free. */
    int (*end)(void *s, int64_t end_ns);
    void (*free)(void *s);
} ls_sink_ops;

typedef struct ls_sink {
    const ls_sink_ops *ops;
    void *s;
} ls_sink;

#define LS_MAX_SINKS 4

/* sink.c: add a sink to r (0, or -1 after one error line: too many); the
 * fan-out, one call per record to every sink that takes it. */
int ls_sink_add(struct recorder *r, const ls_sink_ops *ops, void *s);
void ls_sink_meta(struct recorder *r, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ls_sink_process(struct recorder *r, const ls_proc_rec *p);
void ls_sink_loop(struct recorder *r, uint64_t loop, uint32_t pid, uint32_t tid, int64_t seen);
void ls_sink_loop_stop(struct recorder *r, uint64_t loop, int64_t stopped);
void ls_sink_task(struct recorder *r, const ls_task_rec *t);
void ls_sink_task_unknown(struct recorder *r, uint64_t task, uint64_t loop);
void ls_sink_task_named(struct recorder *r, uint64_t task, uint64_t loop, const char *name,
                        size_t len);
void ls_sink_task_leak(struct recorder *r, uint64_t task, int kind);
void ls_sink_task_finish(struct recorder *r, uint64_t task, uint64_t loop, int64_t ended,
                         int state, int64_t error);
/* The event's rowid is set here: events are numbered 1, 2 ... */
void ls_sink_event(struct recorder *r, ls_event *e);
void ls_sink_window(struct recorder *r, uint64_t loop, const struct ls_window *w);
void ls_sink_hist(struct recorder *r, uint64_t loop, int64_t lo, int64_t hi, uint64_t count,
                  uint64_t busy_ns);
/* A frame, whether the application's by r's decoder; _app: as app says
 * (a group passing on its member's). */
void ls_sink_frame(struct recorder *r, int64_t stack, int depth, uint64_t pc, const ls_sym *f);
void ls_sink_frame_app(struct recorder *r, int64_t stack, int depth, uint64_t pc,
                       const ls_sym *f, bool app);
void ls_sink_stack(struct recorder *r, int64_t stack, int depth);
void ls_sink_block(struct recorder *r, const ls_block_rec *b);
void ls_sink_await_stack(struct recorder *r, uint64_t task, int64_t ts, int64_t stack);
void ls_sink_syscall_stat(struct recorder *r, uint64_t loop, uint32_t tid, uint32_t nr,
                          uint64_t count, uint64_t total_ns, uint64_t max_ns);
/* Every sink's end, in order; the first error. */
int ls_sinks_end(struct recorder *r, int64_t end_ns);
void ls_sinks_free(struct recorder *r);

/* sink_store.c: the SQLite trace as a sink (the store stays the caller's
 * to tick, measure and, after ls_sinks_end, nothing more: end finishes
 * it, free aborts it if it was never ended). */
extern const ls_sink_ops ls_store_sink;

#endif /* LOOPSCOPE_SINK_H */
