/*
 * evl-probes.h -- the probe contract between libevl and any tracer.
 *
 * The USDT probes libevl fires (provider "evl") and the meaning of their
 * numeric arguments.  The tracer (tracer/) and the tests read this file; they
 * never link libevl.  Every enum value is stored in trace databases, so the
 * numbers are fixed: add new values at the end, never renumber.
 *
 * EVL_PROBE_LIST(XX): XX(name, number of arguments, argument names).  A test
 * checks the built library's .note.stapsdt against this table (names,
 * argument counts, and that every operand is a register or a constant).
 */
#ifndef EVL_PROBES_H
#define EVL_PROBES_H

#define EVL_PROBE_LIST(XX)                                                    \
    XX(loop_start,     3, "loop tid pub")                                     \
    XX(loop_stop,      2, "loop tid")                                         \
    XX(task_create,    5, "loop task parent name fn")                         \
    XX(task_run,       2, "loop task")                                        \
    XX(task_suspend,   5, "loop task reason object timeout_ns")               \
    XX(task_wake,      4, "loop task waker_kind waker_task")                  \
    XX(task_finish,    4, "loop task state error")                            \
    XX(task_cancel,    3, "loop task requester")                              \
    XX(task_leak,      3, "loop task leak_kind")                              \
    XX(poll_enter,     2, "loop timeout_ns")                                  \
    XX(poll_exit,      2, "loop nevents")                                     \
    XX(callback_begin, 2, "loop fn")                                          \
    XX(callback_end,   2, "loop fn")                                          \
    XX(batch,          3, "loop addr len")

/* Probe ids, in table order from 1.  They are the `kind` of batch records
 * and of the events table: append new probes at the end of the table. */
enum evl_probe_id {
    EVL_PROBE_ID_NONE = 0,
#define EVL__PROBE_ID(name, nargs, doc) EVL_PROBE_ID_##name,
    EVL_PROBE_LIST(EVL__PROBE_ID)
#undef EVL__PROBE_ID
    EVL_PROBE_ID_COUNT
};

/* task_suspend: why the task stopped.  object is the awaited future's
 * address, the fd, or 0; timeout_ns is the sleep/wait delay or 0. */
enum evl_suspend_reason {
    EVL_SUSPEND_SLEEP = 1,
    EVL_SUSPEND_IO = 2,
    EVL_SUSPEND_FUTURE = 3,
    EVL_SUSPEND_TASK = 4,
    EVL_SUSPEND_YIELD = 5,
    EVL_SUSPEND_EXECUTOR = 6,
    EVL_SUSPEND_GATHER = 7,
};

/* task_wake: what put the task back on the ready queue.  waker_task is the
 * id of the task that was running when it happened (0 if none). */
enum evl_waker_kind {
    EVL_WAKER_TIMER = 1,     /* a sleep's timer fired */
    EVL_WAKER_IO = 2,        /* fd readiness */
    EVL_WAKER_FUTURE = 3,    /* a plain future was completed */
    EVL_WAKER_TASK = 4,      /* an awaited task finished */
    EVL_WAKER_CANCEL = 5,    /* the awaited future was cancelled */
    EVL_WAKER_YIELD = 6,     /* sleep(0): rescheduled itself */
    EVL_WAKER_EXECUTOR = 7,  /* an executor job completed */
    EVL_WAKER_GATHER = 8,    /* an awaited gather completed */
};

/* task_finish: final state (same numbers as enum evl_task_state). */
enum evl_final_state {
    EVL_FINAL_FINISHED = 4,
    EVL_FINAL_FAILED = 5,
    EVL_FINAL_CANCELLED = 6,
};

/* task_leak: the verdict. */
enum evl_leak_kind {
    EVL_LEAK_PENDING_AT_CLOSE = 1, /* still pending when its loop closed */
    EVL_LEAK_ABANDONED = 2,        /* awaits a future nothing can complete */
    EVL_LEAK_UNRETRIEVED = 3,      /* failed; nobody read the error */
};

/* ------------------------------------------------------------- batching
 *
 * A uprobe hit costs 0.3-1 us.  While a tracer has raised the `batch`
 * probe's semaphore, the loop also appends each lifecycle event (all probes
 * but loop_start, loop_stop and batch) as a record to a per-loop buffer and
 * fires `batch(loop, addr, len)` once per iteration (before the poll) and
 * whenever the buffer is full; the tracer copies the buffer.  Records of
 * one loop are in program order, so order within a loop is exact.
 * Fixed-width types only: this layout is read by BPF programs.
 */
#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define EVL_BATCH_BYTES 16384   /* buffer size; batch len never exceeds it */
#define EVL_NAME_MAX 48         /* task names, NUL included */

struct evl_rec {
    __u64 ts;       /* CLOCK_MONOTONIC, ns */
    __u64 task;     /* task id, 0 if none */
    __u64 a0;       /* see below */
    __u64 a1;
    __u32 a32;
    __u16 kind;     /* enum evl_probe_id */
    __u16 size;     /* bytes of this record incl. what follows; multiple of 8 */
};
/* Per kind (same meaning as the probe's arguments):
 *   task_create   a0 parent, a1 function address, a32 name length; the name
 *                 (not NUL-terminated) follows, padded to 8 bytes
 *   task_run      -
 *   task_suspend  a32 reason, a0 object, a1 timeout_ns
 *   task_wake     a32 waker_kind, a0 waker task
 *   task_finish   a32 final state, a0 error (signed)
 *   task_cancel   a0 requesting task
 *   task_leak     a32 leak kind
 *   poll_enter    a0 timeout_ns (signed, -1 = infinite)
 *   poll_exit     a32 number of events
 *   callback_*    a0 function address
 */
_Static_assert(sizeof(struct evl_rec) == 40, "evl_rec layout is ABI");

/* What the loop thread is doing, at the address loop_start announces, so a
 * tracer knows the running task at any instant (sched_switch) even when the
 * lifecycle events themselves arrive in batches. */
enum evl_phase {
    EVL_PHASE_OTHER = 0,    /* loop bookkeeping, or not running */
    EVL_PHASE_POLL = 1,     /* inside epoll_wait: idle, not blocking */
    EVL_PHASE_TASK = 2,     /* a task step runs: `task` */
    EVL_PHASE_CALLBACK = 3, /* a plain callback runs */
};

struct evl_loop_pub {
    __u64 task;     /* id of the running task, 0 if none */
    __u32 phase;    /* enum evl_phase */
    __u32 pad;
};
_Static_assert(sizeof(struct evl_loop_pub) == 16, "evl_loop_pub layout is ABI");

#endif /* EVL_PROBES_H */
