/*
 * pytasks.h -- the asyncio tasks of an unmodified CPython process, read
 * from outside (process_vm_readv) without stopping it: every task, its
 * state, what it awaits and why in asyncio's terms, and its await chain
 * (the coroutine frames from the task's coroutine down to the innermost
 * awaitable).  One read of the whole set is a census; `loopscope ps` prints
 * one, the recorder's asyncio decoder (decode_asyncio.c) diffs a census per
 * tick into a task lifecycle.  How the set is found in each version:
 * PYTHON.md, "The asyncio task set".
 *
 * Everything here was read from the target's memory while it ran: the set
 * may change under the reader, a field may be half-written, an object may be
 * freed.  Every pointer is type-checked before it is followed, every length
 * is bounded, a census reads at most LS_PYT_MAX_TASKS tasks and
 * LS_PYT_MAX_DEPTH frames per task, and a cycle in an await chain ends the
 * chain.
 */
#ifndef LOOPSCOPE_PYTASKS_H
#define LOOPSCOPE_PYTASKS_H

#include "pystack.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LS_PYT_MAX_TASKS 65536     /* tasks of one census */
#define LS_PYT_MAX_DEPTH 64        /* frames of one await chain kept (the innermost) */
#define LS_PYT_WALK 1024           /* coroutines of one await chain followed */
#define LS_PYT_NAME 256            /* bytes of a task's name kept (UTF-8) */
#define LS_PYT_SLOTS 64            /* value-stack slots of a frame looked at for held locks */

/* A task's state as the census saw it. */
enum ls_pyt_state {
    LS_PYT_READY = 1,           /* pending, awaiting nothing: scheduled to run */
    LS_PYT_RUNNING = 2,         /* pending, the current task of its loop */
    LS_PYT_WAITING = 3,         /* pending, awaiting something (reason, object) */
    LS_PYT_FINISHED = 4,        /* done with a result */
    LS_PYT_FAILED = 5,          /* done with an exception */
    LS_PYT_CANCELLED = 6,       /* done, cancelled */
};

/* One frame of an await chain: as struct ls_py_frame (resolve it with
 * ls_py_frame) plus, for the frame the task is parked in, what it awaits. */
struct ls_pytask {
    uint64_t addr;              /* the Task object */
    uint64_t coro;              /* its coroutine (with addr: its identity) */
    uint64_t loop;              /* its loop object */
    uint64_t name_obj;          /* its name object (a str, or an int) */
    int state;                  /* enum ls_pyt_state */
    int reason;                 /* WAITING: an EVL_SUSPEND_* code (evl-probes.h) */
    uint64_t object;            /* WAITING: what it waits on: the awaited Task
                                 * (TASK), the Lock, Event, Queue... (self of
                                 * the asyncio frame), else the future */
    uint64_t waiter;            /* task_fut_waiter: the future it is parked on */
    char awaits[48];            /* the innermost awaitable's type ("Future", "Task") */
    int32_t cancels;            /* cancel requests (3.11+: num_cancels_requested;
                                 * 3.10: must_cancel) */
    bool unretrieved;           /* failed, and its exception was not retrieved yet */
    bool chain_cut;             /* outer frames dropped (past LS_PYT_MAX_DEPTH), or the
                                 * chain looped, went past LS_PYT_WALK or past
                                 * the task's share of the census's steps */
    uint32_t nheld;             /* locks it holds in an `async with` of its chain */
    uint64_t held[4];           /* the Lock, Semaphore or Condition objects */
    char name[LS_PYT_NAME];     /* valid UTF-8 ("Task-N" for a lazy counter) */
    uint32_t nframes;           /* await chain, outermost (the task's coroutine) first */
    struct ls_py_frame frames[LS_PYT_MAX_DEPTH];
};

enum {
    LS_PYT_NO_ASYNCIO = 1,      /* asyncio.tasks is not imported (yet) */
    LS_PYT_TRUNCATED = 2,       /* more tasks than LS_PYT_MAX_TASKS */
    LS_PYT_READ_ERROR = 4,      /* some memory could not be read (a task skipped) */
    LS_PYT_GONE = 8,            /* the process is gone */
};

struct ls_pyt_census {
    size_t n, cap;
    struct ls_pytask *t;        /* n tasks, in address order */
    uint32_t flags;             /* LS_PYT_* */
    int64_t ts;                 /* CLOCK_MONOTONIC when the census began */
    int64_t dur;                /* and how long it took (ns) */
};

typedef struct ls_pytasks ls_pytasks;

/* A reader over the CPython that ls_py_detect found in py (py stays the
 * caller's; it resolves frames too).  NULL when out of memory, or when the
 * version has no asyncio layout (*why says so). */
ls_pytasks *ls_pytasks_new(ls_py *py, const char **why);

/* Reads every task into c (reusing its array).  0, or -1 when the process
 * is gone or the task set cannot be read now (c->flags says which: GONE,
 * READ_ERROR).  With 0, a task that could not be read is left out
 * (READ_ERROR) and so are those past LS_PYT_MAX_TASKS (TRUNCATED): then
 * a task missing from c may still live. */
int ls_pytasks_census(ls_pytasks *pt, struct ls_pyt_census *c);

/* The task at t->addr (with t->coro) read again into t, taking nothing
 * from the census before: the caller knows it is a new task made at the
 * address of one that census saw, with its coroutine at that one's
 * coroutine's (freed memory is reused), which the census took for the
 * same task and whose name and await chain it kept.  The census's own
 * record of it too.  False (t unchanged) if it is no longer that task. */
bool ls_pytasks_reread(ls_pytasks *pt, struct ls_pytask *t);

/* asyncio's current-task dict {loop: task}, once a census found it (0
 * before): the BPF stack walk reads the running task from it when the
 * stack has no Handle._run (uvloop). */
uint64_t ls_pytasks_current_dict(const ls_pytasks *pt);

/* The Task type's tp_init and tp_finalize, once a census has seen a task
 * (0, 0 before): where a task is made and where it is destroyed. */
void ls_pytasks_type_slots(ls_pytasks *pt, uint64_t *tp_init, uint64_t *tp_finalize);

/* Offsets of a Task's fields, for a BPF program that reads a task being
 * destroyed (LS_PY_NONE when absent). */
struct ls_pyt_task_off {
    uint32_t state, log_tb, log_tb_bit, must_cancel, must_cancel_bit, num_cancels,
        log_destroy_pending, log_destroy_bit, exception, coro;
};
void ls_pytasks_task_off(ls_pytasks *pt, struct ls_pyt_task_off *o);

const char *ls_pyt_state_name(int state);
void ls_pyt_census_free(struct ls_pyt_census *c);
void ls_pytasks_free(ls_pytasks *pt);

#endif /* LOOPSCOPE_PYTASKS_H */
