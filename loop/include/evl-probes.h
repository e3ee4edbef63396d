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
    XX(loop_start,     4, "loop tid pub pub_size")                            \
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
    XX(batch,          6, "loop addr len pub nrec seq")

/* Probe ids, in table order from 1.  They are the `kind` of batch records
 * and of the events table: append new probes at the end of the table. */
enum evl_probe_id {
    EVL_PROBE_ID_NONE = 0,
#define EVL__PROBE_ID(name, nargs, doc) EVL_PROBE_ID_##name,
    EVL_PROBE_LIST(EVL__PROBE_ID)
#undef EVL__PROBE_ID
    EVL_PROBE_ID_COUNT
};

/* The numeric arguments, as X-macro lists XX(NAME, value, "name") so that
 * tools can name them (the tracer fills the database's lookup tables from
 * these lists). */

/* task_suspend: why the task stopped.  object is the awaited future's
 * address (the task id when awaiting a task), the fd, the primitive
 * waited on, or for a sleep its deadline (loop clock, ns); timeout_ns is
 * the sleep delay, for a lock the id of the task holding it (what a
 * tracer needs to see a deadlock: A waits for a lock B holds), else 0. */
#define EVL_SUSPEND_LIST(XX)                                                  \
    XX(SLEEP, 1, "sleep")                                                     \
    XX(IO, 2, "io")                                                           \
    XX(FUTURE, 3, "future")                                                   \
    XX(TASK, 4, "task")                                                       \
    XX(YIELD, 5, "yield")                                                     \
    XX(EXECUTOR, 6, "executor")                                               \
    XX(GATHER, 7, "gather")                                                   \
    XX(LOCK, 8, "lock")           /* object: the evl_lock */                  \
    XX(EVENT, 9, "event")         /* object: the evl_event */                 \
    XX(CONDITION, 10, "condition") /* object: the evl_cond */                 \
    XX(SEMAPHORE, 11, "semaphore") /* object: the evl_sem */                  \
    XX(QUEUE_GET, 12, "queue_get") /* object: the evl_queue, it is empty */   \
    XX(QUEUE_PUT, 13, "queue_put") /* object: the evl_queue, it is full */    \
    XX(QUEUE_JOIN, 14, "queue_join") /* object: the evl_queue */              \
    XX(TASKGROUP, 15, "taskgroup") /* object: the evl_taskgroup */            \
    XX(WAIT, 16, "wait")          /* evl_wait / as_completed; object: its future */

/* task_wake: what put the task back on the ready queue.  waker_task is the
 * id of the task that was running when it happened (0 if none). */
#define EVL_WAKER_LIST(XX)                                                    \
    XX(TIMER, 1, "timer")         /* a sleep's timer fired */                 \
    XX(IO, 2, "io")               /* fd readiness */                          \
    XX(FUTURE, 3, "future")       /* a plain future was completed */          \
    XX(TASK, 4, "task")           /* an awaited task finished */              \
    XX(CANCEL, 5, "cancel")       /* the awaited future was cancelled */      \
    XX(YIELD, 6, "yield")         /* sleep(0): rescheduled itself */          \
    XX(EXECUTOR, 7, "executor")   /* an executor job completed */             \
    XX(GATHER, 8, "gather")       /* an awaited gather completed */           \
    XX(LOCK, 9, "lock")           /* the lock was released to it */           \
    XX(EVENT, 10, "event")        /* the event was set */                     \
    XX(CONDITION, 11, "condition") /* notified */                             \
    XX(SEMAPHORE, 12, "semaphore") /* a release let it acquire */             \
    XX(QUEUE, 13, "queue")        /* a put, get or task_done let it go on */  \
    XX(TASKGROUP, 14, "taskgroup") /* its task group's tasks are done */      \
    XX(WAIT, 15, "wait")          /* evl_wait / as_completed completed */

/* task_finish: final state (the same numbers as enum evl_task_state, which
 * also names the states a task passes through). */
#define EVL_STATE_LIST(XX)                                                    \
    XX(CREATED, 0, "created")                                                 \
    XX(READY, 1, "ready")                                                     \
    XX(RUNNING, 2, "running")                                                 \
    XX(SUSPENDED, 3, "suspended")                                             \
    XX(FINISHED, 4, "finished")                                               \
    XX(FAILED, 5, "failed")                                                   \
    XX(CANCELLED, 6, "cancelled")

/* task_leak: the verdict. */
#define EVL_LEAK_LIST(XX)                                                     \
    XX(PENDING_AT_CLOSE, 1, "pending_at_close") /* pending when its loop closed */ \
    XX(ABANDONED, 2, "abandoned")   /* awaits a future nothing can complete */ \
    XX(UNRETRIEVED, 3, "unretrieved") /* failed; nobody read the error */

#define EVL__ENUM_SUSPEND(n, v, s) EVL_SUSPEND_##n = v,
#define EVL__ENUM_WAKER(n, v, s) EVL_WAKER_##n = v,
#define EVL__ENUM_FINAL(n, v, s) EVL_FINAL_##n = v,
#define EVL__ENUM_LEAK(n, v, s) EVL_LEAK_##n = v,
enum evl_suspend_reason { EVL_SUSPEND_LIST(EVL__ENUM_SUSPEND) };
enum evl_waker_kind { EVL_WAKER_LIST(EVL__ENUM_WAKER) };
enum evl_final_state { EVL_STATE_LIST(EVL__ENUM_FINAL) };
enum evl_leak_kind { EVL_LEAK_LIST(EVL__ENUM_LEAK) };
#undef EVL__ENUM_SUSPEND
#undef EVL__ENUM_WAKER
#undef EVL__ENUM_FINAL
#undef EVL__ENUM_LEAK

/* ------------------------------------------------------------- batching
 *
 * A uprobe hit costs 0.3-1.5 us.  While a tracer has raised the `batch`
 * probe's semaphore, the loop also appends each lifecycle event (all probes
 * but loop_start, loop_stop and batch) as a record to a buffer of
 * EVL_BATCH_BYTES and fires `batch(loop, addr, len, pub, nrec, seq)` at a
 * poll once the oldest record has waited EVL_TRACE_FLUSH_NS, and whenever
 * the buffer is full: addr/len is the buffer, nrec the number of records
 * in it, pub the address of the loop's evl_loop_pub (so a tracer that
 * attached mid-run learns it), seq 0 or the number of a kept batch
 * (below).  While records wait, a poll
 * sleeps no longer than it takes the oldest to reach that age, so a
 * tracer gets every record within about EVL_TRACE_FLUSH_NS.  (One hit per
 * sleeping poll, as before, cost a keep-alive HTTP server 7 % of its CPU:
 * a busy server sleeps after every few requests.)  Records of one loop are
 * in program order, so order within a loop is exact.
 *
 * seq 0 means the tracer must copy the batch in the probe: the loop writes
 * over the buffer once the probe returns.  That is the rule until the
 * tracer stores 1 in evl_loop_pub.reader (at loop_start, or at a batch:
 * it needs the right to write the target's memory, ptrace's).  From the
 * next hand-over on, the loop keeps each batch, untouched, until the
 * tracer has stored a number >= its seq (1, 2, ..., skipping 0 when it
 * wraps) in evl_loop_pub.released, and goes on in another of
 * EVL_BATCH_BUFS buffers: the tracer reads the batch when it likes, not
 * in the probe (copying 64 KiB in the loop's thread was most of what the
 * probe cost it).  The buffers are mapped while batching is on, so a
 * traced loop holds up to EVL_BATCH_BUFS * EVL_BATCH_BYTES of records its
 * tracer has not read (it takes the lowest free buffer, so memory is
 * touched only as far as the tracer falls behind).  released is
 * cumulative: storing seq frees that batch and every one before it.  When the tracer holds every buffer,
 * the loop writes into a buffer of its own; when that one is full or its
 * oldest record is EVL_TRACE_FLUSH_NS old and still no buffer is free,
 * its records are dropped and counted in evl_loop_pub.lost, and the loop
 * fires `batch` with len 0 and the last seq handed over, so that a
 * tracer which lost count (a batch message it never got) can free them.
 * A reader therefore stores seq once it has read the batch, for every
 * kept batch it is handed, empty ones included, and stores 0 in reader
 * when it leaves (the loop sets both words itself when batching starts,
 * when no tracer holds a buffer).  When evl_run returns and in
 * evl_loop_free the loop hands over what it holds and waits, while a
 * reader holds batches and EVL_TRACE_DRAIN_NS at most, so that the tracer
 * reads the last records (leak verdicts among them) before the process
 * may exit.  A snapshot request (below) also hands the buffer over at
 * once: a tracer asks for one before it detaches so that it loses
 * nothing.
 *
 * When a tracer attaches to a running loop, the loop first emits a
 * task_create record for every task already pending, with
 * EVL_REC_PREEXISTING set in a32 (their creation happened before the
 * trace; ts is the attach time), and fires `batch` at once, before any
 * callback of that iteration runs, so the tracer knows the loop thread
 * (and its evl_loop_pub) before a task can block: the snapshot.  The loop
 * reads the batch semaphore once an iteration, after its poll, and
 * remembers the value.  A rise from 0 is a fresh attach: batching starts
 * there, with the snapshot.  Any other rise (batching is on) asks for
 * the snapshot again: the loop first hands over what it has buffered (it
 * belongs to tracers already attached), then emits the snapshot the same
 * way.  A fall only updates the value remembered.
 *
 * The kernel counts a semaphore once per probe site that has a tracer,
 * however many tracers the site has, and raises it when the uprobe is
 * created, a moment before the tracer's program is attached: the snapshot
 * of a loop that iterates in between goes to no program.  Hence the gate,
 * probe evl_gate:batch (provider evl_gate, no arguments, not in
 * EVL_PROBE_LIST): one site that never runs, whose semaphore is batch's.
 * A tracer attaches to it after its program on `batch` (any program; it
 * never runs), and that site's rise comes when the program is in place.
 * The gate's site counts once too: a tracer attaching while another holds
 * the gate, or after another left while the loop slept (the loop saw the
 * same value before and after), raises nothing, and asks through
 * evl_loop_pub.snapshot_req (below) instead.
 *
 * Fixed-width types only: this layout is read by BPF programs.
 */
#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define EVL_BATCH_BYTES 65536   /* buffer size; batch len never exceeds it */
#define EVL_BATCH_BUFS 256      /* buffers a tracer may hold: 16 MiB */
#define EVL_TRACE_DRAIN_NS 1000000000ull /* the longest evl_run's return waits for a tracer */
#define EVL_TRACE_FLUSH_NS 10000000ull /* the longest a record waits in it, about */
#define EVL_NAME_MAX 48         /* task names, NUL included */
#define EVL_REC_PREEXISTING 0x80000000u /* task_create a32 flag */

struct evl_rec {
    __u64 ts;       /* CLOCK_MONOTONIC, ns (between clock reads the loop
                     * may count it with the TSC: loop/README.md, "The
                     * records' clock"; never decreasing, never later
                     * than the clock when its batch is handed over) */
    __u64 task;     /* task id, 0 if none */
    __u64 a0;       /* see below */
    __u64 a1;
    __u32 a32;
    __u16 kind;     /* enum evl_probe_id */
    __u16 size;     /* bytes of this record incl. what follows; multiple of 8 */
};
/* Per kind (same meaning as the probe's arguments):
 *   task_create   a0 parent, a1 function address, a32 name length (and
 *                 EVL_REC_PREEXISTING); the name (not NUL-terminated)
 *                 follows, padded to 8 bytes
 *   task_run      -
 *   task_suspend  a32 reason, a0 object (for a sleep: its deadline in loop
 *                 time, CLOCK_MONOTONIC ns), a1 timeout_ns
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
    __u64 since;    /* CLOCK_MONOTONIC ns when this task step / callback
                     * began; maintained only while batching is on */
    __u32 phase;    /* enum evl_phase */
    __u32 steps;    /* bumped at every step or callback start */
    /* Snapshot request, one of two words a tracer writes: while batching, the
     * loop compares it with `snapshot_done` after each iteration's poll
     * and, when they differ, copies it there and emits the task_create
     * snapshot again (and a batch at once).  A rise of the batch
     * semaphore asks the same (above) with no right to write the
     * target's memory; this word serves a tracer whose attach raises
     * nothing (another tracer holds the gate, or left while the loop
     * slept), and one about to detach (the buffer handed over at once). */
    __u32 snapshot_req;
    __u32 snapshot_done;
    /* The tracer's other words (batching, above): released, the seq of
     * the last kept batch it has read, and reader, 1 while it reads kept
     * batches.  The loop sets them itself only when batching starts, when
     * no tracer holds a buffer. */
    __u32 released;
    __u32 reader;
    __u32 lost;     /* records dropped for want of a free buffer, wrapping */
    __u32 pad;
};
_Static_assert(sizeof(struct evl_loop_pub) == 48, "evl_loop_pub layout is ABI");

/* Where a debugger finds every loop of a process and each loop's pending
 * tasks, reading its memory from outside (`loopscope ps`), as CPython
 * publishes _Py_DebugOffsets: the global `evl_debug` (a dynamic symbol of
 * the program or of libevl.so) holds the list of live loops and the
 * offsets of the fields to read.  The loops list changes under the
 * mutex of debug.c, which bumps `generation` before and after (odd: a
 * change is under way); a task list changes on the loop's thread without
 * notice: a reader bounds its walks and checks what it reads. */
#define EVL_DEBUG_MAGIC "evldebug"
#define EVL_DEBUG_VERSION 1
struct evl_debug {
    char magic[8];                  /* EVL_DEBUG_MAGIC */
    __u32 version;                  /* EVL_DEBUG_VERSION */
    __u32 size;                     /* sizeof(struct evl_debug) */
    __u64 loops;                    /* the first live loop (struct evl_loop *), 0: none */
    __u64 generation;
    /* struct evl_loop */
    __u32 loop_next, loop_id, loop_tid, loop_tasks, loop_ntasks, loop_current, loop_pub;
    /* struct evl__task: pending tasks, linked by `next` */
    __u32 task_next, task_id, task_parent, task_fn, task_name, task_name_size, task_state,
        task_ncancels, task_reason, task_object, task_timeout, task_since, task_loop;
    /* a suspended task's saved stack pointer: evl__ctx_switch pushed rbp,
     * rbx, r12-r15 below its return address (switch_x86_64.S) */
    __u32 task_sp, pad;
};
_Static_assert(sizeof(struct evl_debug) == 120, "evl_debug layout is ABI");

#endif /* EVL_PROBES_H */
