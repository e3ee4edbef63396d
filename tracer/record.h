/*
 * record.h -- messages from record.bpf.c to the recorder (ingest.c,
 * blocks.c) through the ring buffer, and the BPF-side counters.  Shared by BPF and user space:
 * fixed-width types only, explicit padding, sizes asserted.  Nothing here
 * is stored in a trace as is: both sides are built together, so a layout
 * or a number may change when both change (what traces store by number is
 * in model/codes.h and loop/include/evl-probes.h).
 */
#ifndef LOOPSCOPE_RECORD_H
#define LOOPSCOPE_RECORD_H

#include "codes.h"
#include "evl-probes.h"
#include "pystack.h"

enum ls_msg_type {
    LS_MSG_BATCH = 1,       /* payload: len bytes of struct evl_rec records */
    LS_MSG_REC = 2,         /* payload: one evl_rec (+ name), unbatched mode */
    LS_MSG_LOOP_START = 3,  /* payload: none (pub in hdr.arg) */
    LS_MSG_LOOP_STOP = 4,
    LS_MSG_BLOCK = 5,       /* payload: struct ls_block + struct ls_pystack + stack bytes */
    LS_MSG_WINDOW = 6,      /* generic mode: payload struct ls_window (loop = tid) */
    LS_MSG_BATCH_REF = 7,   /* payload: struct ls_batch_ref; the records stay in
                             * the target until the recorder reads them */
    LS_MSG_PYTASK = 8,      /* generic mode, CPython: payload struct ls_pytask_ev
                             * (loop 0: not a loop's message) */
    LS_MSG_PROC = 9,        /* a process group (--children): the target forked a
                             * process (loop LS_PROC_FORK, arg its pid) or exec'd
                             * (loop LS_PROC_EXEC); no payload */
};
enum { LS_PROC_FORK = 1, LS_PROC_EXEC = 2 };

/* An asyncio Task of a CPython target made (its type's tp_init ran) or
 * being destroyed (tp_finalize: the last moment it can be read), from the
 * uprobes decode_asyncio.c attaches once a census has seen the Task type.
 * FINAL reads what the task was: the census may never have seen it. */
enum { LS_PYT_EV_INIT = 1, LS_PYT_EV_FINAL = 2 };
enum {
    LS_PYT_BIT_LOG_TB = 1,          /* an exception nobody retrieved */
    LS_PYT_BIT_LOG_PENDING = 2,     /* asyncio will log "destroyed but it is pending" */
    LS_PYT_BIT_EXCEPTION = 4,       /* it holds an exception */
};
struct ls_pytask_ev {
    __u64 task, coro;
    __u32 what;             /* LS_PYT_EV_* */
    __u32 state;            /* FINAL: fut_state (0 pending, 1 cancelled, 2 finished) */
    __u32 bits;             /* FINAL: LS_PYT_BIT_* */
    __u32 name_len;         /* FINAL: bytes in name, flags as ls_pystack's */
    __u32 name_flags;
    __u32 pad;
    char name[LS_PY_TASK_NAME];
};
_Static_assert(sizeof(struct ls_pytask_ev) == 88, "ls_pytask_ev layout");

/* Where a Task keeps what LS_PYT_EV_FINAL reads (pystack_tasks.c's
 * layout; bit LS_PY_NONE: a whole int, else a bit of a bitfield word). */
struct ls_pyt_bpf_cfg {
    __u32 on;               /* 0: the programs return at once */
    __u32 state, log_tb, log_tb_bit, log_pending, log_pending_bit, exception, coro;
};

/* A batch of a loop whose batch probe has a seq (evl-probes.h): where it
 * is, the recorder reads it from the target and then stores seq in
 * evl_loop_pub.released (hdr.arg).  hdr.nrec: the records it holds. */
struct ls_batch_ref {
    __u64 addr;
    __u32 len;
    __u32 seq;
};
_Static_assert(sizeof(struct ls_batch_ref) == 16, "ls_batch_ref layout");

struct ls_msg_hdr {
    __u32 type;             /* enum ls_msg_type */
    __u32 len;              /* payload bytes following the header */
    __u64 ts;               /* bpf_ktime_get_ns() at the probe (CLOCK_MONOTONIC) */
    __u64 loop;             /* loop id (generic mode: the loop thread's tid) */
    __u64 arg;              /* LOOP_*: evl_loop_pub address; BATCH*: pub too */
    __u32 pid;              /* tgid */
    __u32 tid;
    __u32 nrec;             /* records in the payload */
    __u32 pad;              /* LOOP_START: the size of the loop's evl_loop_pub
                             * (32 in a libevl from before it held released);
                             * BATCH: 1 if the loop can keep its batches */
};
_Static_assert(sizeof(struct ls_msg_hdr) == 48, "ls_msg_hdr layout");

/* A blocking episode on a loop thread, or the sample of a long on-CPU step,
 * with what is needed to unwind the user stack at that point: the user
 * registers (DWARF numbering) and a copy of the stack above rsp.  The
 * message header's ts is when it was taken: the switch-out, or the
 * sample. */
/* kind: enum ls_blocking_kind (model/codes.h): LS_BLOCK_OFFCPU, LS_BLOCK_ONCPU */

#define LS_STACK_BYTES 65536
/* Blocking episodes open at once (maps offcpu and oncpu_open, one per loop
 * thread that is blocked now): preallocated, because an element is a
 * block_msg (its stack copy: over 64 KiB), which the kernel would have to
 * find as contiguous memory inside sched_switch otherwise -- and under
 * memory pressure it does not (an episode was lost that way). */
#define LS_OPEN_EPISODES 64
#define LS_NREGS 17         /* rax rdx rcx rbx rsi rdi rbp rsp r8-r15 rip */

struct ls_block {
    __u64 start_ns;         /* off-CPU: switch-out; on-CPU: step start */
    __u64 dur_ns;           /* off-CPU: time switched out; on-CPU: 0 */
    __u64 task;             /* running task (evl_loop_pub.task), 0 = callback */
    __s64 syscall;          /* syscall the thread was in, -1 if none */
    __u32 kind;             /* enum ls_block_kind */
    __u32 phase;            /* enum evl_phase */
    __u32 steps;            /* evl_loop_pub.steps: identifies the step */
    __u32 stack_len;        /* bytes of stack copied after this struct */
    __u64 regs[LS_NREGS];
};
_Static_assert(sizeof(struct ls_block) == 184, "ls_block layout");

/* Generic loop mode: a loop thread's iterations summed over a window.  An
 * iteration ends when the thread enters its wait call (epoll_wait ...);
 * its busy time runs from the previous wait's return to that entry. */
#define LS_HIST_BUCKETS 40  /* busy time in [2^b, 2^(b+1)) ns; bucket 0 holds 0 and 1 */

struct ls_window {
    __u64 start_ns;
    __u64 end_ns;
    __u64 iterations;
    __u64 wait_ns;          /* inside the wait call */
    __u64 busy_ns;          /* between a return and the next entry */
    __u64 max_busy_ns;
    __u32 hist[LS_HIST_BUCKETS];    /* iterations per busy-time bucket */
    __u64 hist_ns[LS_HIST_BUCKETS]; /* their busy time */
};
_Static_assert(sizeof(struct ls_window) == 48 + 12 * LS_HIST_BUCKETS, "ls_window layout");

/* Generic mode: the BPF side's state of one loop thread (map gloops, read
 * back by the recorder at the end for the last window).  A thread of the
 * target becomes a loop thread when it enters a wait call. */
struct ls_gloop {
    __u64 since;            /* last return from the wait call, 0 before it */
    __u64 enter_ns;         /* entry into the wait call, while inside */
    __u32 in_wait;
    __u32 steps;            /* wait returns so far: identifies a step */
    __u32 epoll;            /* it has waited in epoll_wait & co.: its poll and
                             * select calls are not waits (--wait-calls auto) */
    __u32 polls;            /* waits in poll or select */
    __u32 woke;             /* --wait-hook switch: it woke a thread since its step began */
    __u32 pad;
    struct ls_window w;     /* the window being summed */
};

/* An open off-CPU episode (map offcpu) is extended only by the switch-in
 * that ends one of its sleeps: hdr.pad holds LS_ASLEEP from the sleeping
 * switch-out in the episode's call to the next switch-in, so time the
 * thread spent preempted after the call returned never counts.  The pad is
 * 0 in every message sent. */
#define LS_ASLEEP 1u

/* Time off the CPU in the current step of each loop thread (map step_off),
 * so that an on-CPU episode counts CPU time, not wall time: time switched
 * out, and time stolen by the hypervisor while it ran (steal, which the
 * guest's clock counts but its CPU did not run; record.bpf.h, rq_clocks). */
struct ls_step_off {
    __u32 steps;            /* the step (evl_loop_pub.steps, or generic steps) */
    __u32 pad;
    __u64 off_ns;           /* switched-out and stolen time within that step,
                               up to the last switch-out */
    __u64 out_ns;           /* switched out since, 0 if running */
    __u64 in_ns;            /* running since (switched in), 0 if not known */
    __u64 unrun_in;         /* its CPU's time given no task then (rq_clocks) */
    __u64 anchor_ns;        /* a ktime, and the run queue's clock then */
    __u64 anchor_clock;
};

/* --syscalls: time spent in each syscall by each loop thread. */
struct ls_sys_key {
    __u32 tid;
    __u32 nr;
};

struct ls_sys_stat {
    __u64 count;
    __u64 total_ns;
    __u64 max_ns;
};

/* Counters, one slot each in the per-CPU array `stats`.  What the kernel
 * saw is exact; LS_STAT_CLAIMED_* are the record counts the target passed
 * as `nrec` with its batches, believed by nobody: they are stored labelled
 * as the target's claim. */
enum ls_stat {
    LS_STAT_BATCHES = 0,        /* batch messages delivered */
    LS_STAT_CLAIMED_RECS = 1,   /* nrec the target claimed for delivered batches */
    LS_STAT_DROPPED_MSGS = 2,   /* messages the ring buffer had no room for */
    LS_STAT_CLAIMED_DROPPED = 3,/* nrec the target claimed for dropped batches */
    LS_STAT_READ_ERRORS = 4,    /* user memory that could not be read, bad lengths */
    LS_STAT_DROPPED_BYTES = 5,  /* payload bytes of the dropped messages */
    LS_STAT_UNTRACKED_WAITS = 6,/* generic: wait calls of threads beyond the 1024 loop threads */
    LS_STAT_LOST_EPISODES = 7,  /* episodes not kept: LS_OPEN_EPISODES already open */
    LS_STAT_STALE_WAITS = 8,    /* generic: a wait call's return not seen (record_wait.bpf.h) */
    LS_STAT_UNSEEN_SWITCHES = 9,/* a loop thread back on a CPU with no switch seen (record.bpf.h) */
    LS_STAT_COUNT = 10,
};

#endif /* LOOPSCOPE_RECORD_H */
