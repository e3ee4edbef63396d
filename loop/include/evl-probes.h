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
    XX(loop_start,     2, "loop tid")                                         \
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
    XX(callback_end,   2, "loop fn")

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

#endif /* EVL_PROBES_H */
