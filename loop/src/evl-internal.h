/*
 * evl-internal.h -- libevl's private structures.  See loop/README.md for the
 * overview (phases of an iteration, ordering rules, ownership).
 */
#ifndef EVL_INTERNAL_H
#define EVL_INTERNAL_H

#include "evl.h"
#include "evl-probes.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define evl__container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))
#define EVL__LIKELY(x) __builtin_expect(!!(x), 1)
#define EVL__UNLIKELY(x) __builtin_expect(!!(x), 0)
#define EVL__COLD __attribute__((cold, noinline)) /* the tracing slow paths */

typedef struct evl__handle evl__handle;
typedef struct evl__task evl__task;
typedef struct evl__stack evl__stack;

/* ------------------------------------------------------------ probes */

#ifdef EVL_PROBES
#define _SDT_HAS_SEMAPHORES 1
#define SDT_USE_VARIADIC 1
#include <sys/sdt.h>
#define EVL__SEM_DECL(name, nargs, doc) extern volatile unsigned short evl_##name##_semaphore;
EVL_PROBE_LIST(EVL__SEM_DECL)
#undef EVL__SEM_DECL
/* Argument preparation is skipped unless a tracer raised the semaphore. */
#define EVL_PROBE_ENABLED(name) EVL__UNLIKELY(evl_##name##_semaphore != 0)
/* Its value: how many of the probe's sites have a tracer (the kernel
 * counts a site once, however many tracers it has; evl-probes.h). */
#define EVL_PROBE_SEM(name) (evl_##name##_semaphore)
#define EVL_PROBE(name, ...)                                                  \
    do {                                                                      \
        if (EVL_PROBE_ENABLED(name))                                          \
            STAP_PROBEV(evl, name, __VA_ARGS__);                              \
    } while (0)
#else
#define EVL_PROBE_ENABLED(name) 0
#define EVL_PROBE_SEM(name) 0
#define EVL_PROBE(name, ...) do { } while (0)
#endif

/* ------------------------------------------------------- ready queue */

/* A circular doubly-linked FIFO with the queue itself as sentinel, so a
 * handle can be unlinked in O(1) wherever it lives (timers and io waits
 * stopped after they became due). */
typedef struct evl__queue {
    evl__handle head;
} evl__queue;

static inline void evl__queue_init(evl__queue *q)
{
    q->head.next = q->head.prev = &q->head;
    q->head.run = NULL;
}
static inline bool evl__queue_empty(const evl__queue *q) { return q->head.next == &q->head; }
static inline bool evl__handle_queued(const evl__handle *h) { return h->next != NULL; }
static inline void evl__queue_push(evl__queue *q, evl__handle *h)
{
    assert(!evl__handle_queued(h));
    h->next = &q->head;
    h->prev = q->head.prev;
    q->head.prev->next = h;
    q->head.prev = h;
}
static inline void evl__queue_remove(evl__handle *h)
{
    h->prev->next = h->next;
    h->next->prev = h->prev;
    h->next = h->prev = NULL;
}
static inline evl__handle *evl__queue_pop(evl__queue *q)
{
    evl__handle *h = q->head.next;
    if (h == &q->head)
        return NULL;
    evl__queue_remove(h);
    return h;
}

/* ----------------------------------------------------------- futures */

enum evl__future_kind {
    EVL__FUT_PLAIN = 0,    /* evl_future_new */
    EVL__FUT_TASK = 1,     /* embedded first in evl__task */
    EVL__FUT_GATHER = 2,   /* embedded first in evl__gather */
    EVL__FUT_EXEC = 3,     /* embedded first in evl__job */
    EVL__FUT_STACK = 4,    /* lives in a suspended task's frame; never freed */
    EVL__FUT_SHIELD = 5,   /* embedded first in evl__shield (evl_shield) */
    EVL__FUT_OWNED = 6,    /* embedded first in evl__owned_fut: a helper's */
};

/* A done-callback registration.  While registered it sits on the future's
 * callback list; when the future completes its handle moves to the ready
 * queue (call_soon), and run() finds the waiter with container_of. */
typedef struct evl__waiter {
    evl__handle h;
    struct evl__waiter *next; /* in fut->cbs while registered */
    evl_future *fut;          /* the future; a hold keeps it allocated */
} evl__waiter;

struct evl_future {
    evl_loop *loop;
    evl__waiter *cbs_head;  /* registered done-callbacks, FIFO */
    evl__waiter *cbs_tail;
    intptr_t result;        /* value (>= 0) or error (< 0) once done */
    uint32_t refs;          /* references able to complete / read it */
    uint32_t holds;         /* registered or scheduled waiters */
    uint8_t state;          /* enum evl_future_state */
    uint8_t kind;           /* enum evl__future_kind */
    uint8_t retrieved;      /* someone read the result or error */
    uint8_t waker_kind;     /* enum evl_waker_kind reported to waiters */
};

static inline void evl__future_init(evl_future *f, evl_loop *loop, int kind, uint8_t waker_kind)
{
    f->loop = loop;
    f->cbs_head = f->cbs_tail = NULL;
    f->result = 0;
    f->refs = 1;
    f->holds = 0;
    f->state = EVL_FUTURE_PENDING;
    f->kind = (uint8_t)kind;
    f->retrieved = 0;
    f->waker_kind = waker_kind;
}
/* Complete f (state DONE or CANCELLED) and schedule its done-callbacks. */
void evl__future_complete(evl_future *f, int state, intptr_t result);
void evl__future_add_waiter(evl_future *f, evl__waiter *w, void (*run)(evl__handle *));
/* Unlink w from f's list if it is still there; returns true if it was. */
bool evl__future_remove_waiter(evl_future *f, evl__waiter *w);
/* Free f, which nothing references or holds any more (by its kind). */
void evl__future_free_now(evl_future *f);
static inline void evl__future_maybe_free(evl_future *f)
{
    if (!f->refs && !f->holds)
        evl__future_free_now(f);
}
/* Drop a hold taken by a waiter; frees f if nothing references it. */
static inline void evl__future_unhold(evl_future *f)
{
    assert(f->holds > 0);
    f->holds--;
    evl__future_maybe_free(f);
}
static inline intptr_t evl__future_outcome(const evl_future *f)
{
    return f->state == EVL_FUTURE_CANCELLED ? EVL_ECANCELED : f->result;
}

/* A done-callback of libevl's own helpers (shield, wait, as_completed, task
 * groups): scheduled with call_soon like any done-callback (loop/ORDERING.md
 * rule 4), but embedded in the helper's memory, and bookkeeping only (no
 * user code runs in fn), so evl_loop_free may run it to let it go.  fn
 * receives the future; a hold keeps that future allocated while fn runs. */
typedef struct evl__cb evl__cb;
typedef void (*evl__cb_fn)(evl__cb *c, evl_future *f);
struct evl__cb {
    evl__waiter w;            /* w.fut: the future while registered or queued */
    evl__cb_fn fn;
};
void evl__cb_add(evl_future *f, evl__cb *c, evl__cb_fn fn);
/* Unregister c, also when it is already queued (fn will not run); false if
 * it ran already or was never added.  asyncio's remove_done_callback leaves
 * a queued callback to run; every fn of these helpers does nothing once its
 * helper has moved on, so taking it out of the queue changes nothing. */
bool evl__cb_remove(evl__cb *c);

/* The future a helper (wait, as_completed, task group exit) makes its task
 * await, inside the helper's heap block; never freed by refcount.  When
 * evl_loop_free destroys a task suspended on it (the task never returns
 * into the helper), abandon() lets the helper release what only that task
 * would have released. */
typedef struct evl__owned_fut {
    evl_future fut;
    void (*abandon)(struct evl__owned_fut *f);
} evl__owned_fut;

static inline void evl__owned_fut_init(evl__owned_fut *f, evl_loop *loop, uint8_t waker_kind,
                                       void (*abandon)(evl__owned_fut *))
{
    evl__future_init(&f->fut, loop, EVL__FUT_OWNED, waker_kind);
    f->abandon = abandon;
}

/* debug.c: the live loops a debugger reads (evl_debug, evl-probes.h) */
void evl__debug_add(evl_loop *loop);
void evl__debug_remove(evl_loop *loop);

/* The future a shield (evl_shield) stands for: f itself if f is none. */
evl_future *evl__shield_inner(evl_future *f);

/* -------------------------------------------------------------- tasks */

struct evl__task {
    evl_future fut;           /* first: a task is a future */
    evl__handle step;         /* call_soon(step): first step, yields */
    evl__waiter wait;         /* registration on the awaited future */
    evl_future *fut_waiter;   /* what it awaits (asyncio's _fut_waiter) */
    struct evl__task *prev, *next; /* the loop's list of pending tasks */
    evl_task_fn fn;
    void *arg;
    void *sp;                 /* saved stack pointer while switched out */
    evl__stack *stack;        /* bound at the first step, NULL before */
    void *asan_fake;          /* sanitizer fiber bookkeeping */
    uint64_t id;
    uint64_t parent_id;
    intptr_t resume;          /* what the suspended await returns */
    intptr_t ret;             /* fn's return value once it returned */
    uint32_t ncancels;        /* cancellation requests so far */
    uint32_t wait_reason;     /* suspended: its task_suspend reason, object, */
    uint64_t wait_obj;        /* timeout and when, for a debugger (evl_debug) */
    uint64_t wait_timeout;
    uint64_t wait_since;
    uint8_t tstate;           /* enum evl_task_state */
    uint8_t must_cancel;      /* throw ECANCELED at the next step */
    uint8_t returned;         /* fn returned; finalise after switch-out */
    uint8_t leak_reported;    /* a leak verdict was given already */
    char name[48];
};

static inline evl__task *evl__task_of(evl_future *f) { return (evl__task *)(void *)f; }

/* Suspend the current task on f (which must be pending) and return what the
 * await yields; the common path of every await. */
intptr_t evl__task_wait(evl__task *t, evl_future *f, int reason, uint64_t obj, uint64_t timeout);
int evl__task_cancel(evl__task *t);
void evl__task_free(evl__task *t);
void evl__task_report_leak(evl__task *t, int kind);
void evl__task_destroy_pending(evl_loop *loop);
static inline evl__task *evl__current_task(void); /* (below the loop) */

/* ------------------------------------------------------------- stacks */

struct evl__stack {
    evl__stack *next;         /* pool free list */
    void *base;               /* mmap start (guard page first) */
    size_t map_size;          /* whole mapping */
    void *lo, *hi;            /* usable range */
    void *top;                /* where the task's frames start: hi less
                               * the stack's colour (stack.c) */
};

evl__stack *evl__stack_get(evl_loop *loop);
void evl__stack_put(evl_loop *loop, evl__stack *s);
void evl__stack_pool_release(evl_loop *loop);
void evl__stack_install_overflow_handler(void);
/* The stack that contains addr's guard page among the loop's, for the
 * overflow report; set while a task runs. */
extern __thread evl__task *evl__tls_running_task;

/* Context switch: save callee-saved state on the current stack, store the
 * stack pointer in *from, continue on to. */
void evl__ctx_switch(void **from, void *to);
void *evl__ctx_make(void *stack_hi, void (*entry)(void *), void *arg);

/* -------------------------------------------------------------- timers */

typedef struct evl__heap_entry {
    uint64_t deadline;        /* copies of t->evl__deadline and evl__seq:  */
    uint64_t seq;             /* sifting compares in place, no pointer chase */
    evl_timer *t;
} evl__heap_entry;

typedef struct evl__heap {
    evl__heap_entry *a;       /* 4-ary min-heap on (deadline, seq) */
    uint32_t n, cap;
} evl__heap;

void evl__heap_release(evl__heap *h);
void evl__timers_release(evl_loop *loop);
bool evl__timer_discard(evl__handle *h);
/* evl__timers_run_due once a timer is due (timer.c). */
void evl__timers_fire_due(evl_loop *loop);
/* Release a done-callback or gather handle without running its callback;
 * false if h is neither. */
bool evl__future_discard(evl__handle *h);
/* Move every due timer's handle to the ready queue, in heap order; and
 * the deadline of the earliest armed timer (false if none): inline, below
 * the loop. */
static inline void evl__timers_run_due(evl_loop *loop);
static inline bool evl__timers_next(const evl_loop *loop, uint64_t *deadline);

/* -------------------------------------------------------------- poller */

typedef struct evl__iowait {
    evl__handle h;            /* queued when the fd is ready */
    evl_future fut;           /* completed with the ready mask */
    int fd;
    unsigned events;
    unsigned revents;
} evl__iowait;

typedef struct evl__fdent {
    evl__iowait *reader, *writer;
    uint32_t armed;           /* epoll interest currently registered */
    uint32_t grace;           /* directions whose waiter fired and may soon
                               * wait again: keep their interest once */
    uint32_t internal;        /* loop-internal fd (the wakeup eventfd) */
    uint32_t rd_spec;         /* a read-side call met EAGAIN here (or a
                               * speculative read was confirmed) since the
                               * last failed one: the next read may be
                               * speculative (loop/ORDERING.md rule 16) */
} evl__fdent;

int evl__poll_init(evl_loop *loop);
void evl__poll_release(evl_loop *loop);
/* Wait up to timeout_ns (-1: forever) and queue the handles of ready fds. */
int evl__poll(evl_loop *loop, int64_t timeout_ns);
int evl__poll_arm(evl_loop *loop, int fd, uint32_t events);
/* evl__poll's answer when the fd of the pending speculative read
 * (loop->spec) may have been readable: nothing was dispatched; the caller
 * resumes the reader with evl__poll_spec_resume and polls again. */
#define EVL__POLL_SPEC_MISSED (-1)
/* Resume the task of the missed speculative read at once (its read then
 * makes the syscall), before anything else runs; loop/ORDERING.md rule 16. */
void evl__poll_spec_resume(evl_loop *loop);
/* The handle of an fd wait (io.c): completes the wait's future, runs no
 * user code and makes no syscall (so it cannot make an fd ready). */
void evl__iowait_run(evl__handle *h);
/* Polls of a loop: the poll may be skipped (rule 16) only when the batch
 * since the last one ran at most this many fd-wait completions (each a
 * few stores: the time since that poll is bounded by this work). */
#define EVL__POLL_SKIP_MAX_WAKES 64

/* ------------------------------------------------------------ executor */

typedef struct evl__executor evl__executor;
void evl__executor_release(evl_loop *loop);

/* ---------------------------------------------------------------- loop */

typedef struct evl__cbhandle {
    evl__handle h;
    evl_loop *loop;
    evl_callback cb;
    void *arg;
    evl_timer timer;          /* for evl_call_later */
} evl__cbhandle;

struct evl_loop {
    evl__queue ready;         /* the FIFO of callbacks */
    struct evl_loop *dbg_prev, *dbg_next; /* the live loops (debug.c) */
    struct evl_loop_pub pub;  /* running task / phase, for tracers */
    uint32_t trace_len;       /* bytes used in trace_buf */
    uint32_t trace_nrec;      /* records in trace_buf */
    uint8_t *trace_buf;       /* where records go: a buffer of trace_ring, or
                               * trace_spill while the tracer holds them all */
    /* the records' clock (trace.h, evl__trace_now): CLOCK_MONOTONIC read
     * at an anchor, the TSC in between; tc_span 0: not calibrated */
    uint64_t tc_ns, tc_tsc;   /* the anchor: a clock read and the TSC then */
    uint64_t tc_mult;         /* ns per TSC tick, times 2^32 */
    uint64_t tc_span;         /* TSC ticks the anchor serves (EVL__TC_ANCHOR_NS) */
    uint64_t tc_last;         /* the latest time given to a record */
    uint8_t trace_on;         /* batching was on last iteration */
    uint8_t tracing;          /* some probe is enabled (trace.h) */
    uint16_t trace_sem;       /* the batch semaphore as last seen: a rise
                               * asks for the snapshot (task.c) */
    uint64_t now;             /* cached time: evl__loop_now */
    uint8_t now_stale;        /* real clock: read now at its next use */
    evl__heap timers;
    uint64_t timer_seq;       /* next timer sequence number */
    evl__task *current;       /* task whose step is running, or NULL */
    void *loop_sp;            /* loop stack pointer while a task runs */
    void *asan_fake;          /* sanitizer: loop stack's fake frame */
    const void *asan_bottom;  /* sanitizer: loop stack bounds */
    size_t asan_size;
    evl__task *tasks;         /* pending tasks (doubly linked) */
    uint64_t ntasks;          /* pending task count */
    uint64_t next_task_id;    /* ids of this loop's block, [next, end) */
    uint64_t task_id_end;
    uint64_t task_structs;    /* live task structs (not on task_free); a
                               * closed loop stays allocated until 0 */
    evl__stack *stack_pool;   /* free stacks */
    uint32_t stack_pool_n;
    uint32_t stacks_made;     /* stacks mapped so far: their colours */
    size_t stack_size;        /* usable bytes per stack */
    evl__task *task_free;     /* recycled task structs */
    evl__cbhandle *cb_free;   /* recycled call_soon handles */
    int epfd;
    evl__fdent *fds;          /* indexed by fd */
    int nfds;
    uint32_t io_waits;        /* armed task waits on fds */
    /* loop/ORDERING.md rule 16 (skipped and merged polls) */
    evl__iowait *spec;        /* speculative read awaiting the next poll */
    evl__iowait *spec_missed_w; /* the one that poll did not confirm */
    const evl__handle *batch_end; /* the run phase's marker, NULL outside */
    uint8_t io_quiet;         /* only fd-wait completions ran since the
                               * last poll */
    uint8_t poll_whole;       /* the last poll completed, not truncated */
    uint64_t polls_skipped;   /* counters, for tests and benchmarks */
    uint64_t spec_reads;      /* speculative reads started ... */
    uint64_t spec_missed;     /* ... and those the poll did not confirm */
    int wakefd;               /* eventfd: threadsafe calls, executor */
    pthread_mutex_t ts_lock;  /* guards ts_queue */
    evl__queue ts_queue;      /* handles from other threads */
    atomic_uint ts_pending;   /* nonzero when ts_queue may be non-empty */
    atomic_uint holds;        /* evl_loop_hold count */
    evl__executor *exec;
    uint32_t exec_inflight;   /* jobs submitted, not yet collected */
    unsigned flags;           /* enum evl_loop_flags */
    unsigned executor_threads;
    uint64_t slow_step_ns;
    uint64_t id;
    uint32_t tid;             /* thread running it */
    uint8_t running;
    uint8_t stopping;
    uint8_t closing;          /* 1: evl_loop_free running; 2: freed, the
                               * struct lives on for tasks still referenced */
    /* batch records for the tracer (evl-probes.h), EVL_BATCH_BYTES (64 KiB)
     * a buffer; handed over by the batch probe (evl__trace_hand_over,
     * trace.c) at a poll once the oldest is EVL_TRACE_FLUSH_NS old (a
     * sleeping poll is cut short to wake by then), when the next record
     * would not fit, at a snapshot (task.c), when evl_run returns and in
     * evl_loop_free.  trace_ring: EVL_BATCH_BUFS buffers, mapped while
     * batching is on (NULL if that failed: every record is then lost);
     * trace_seq: the last batch handed over; trace_held: the last
     * batch handed over in each buffer (trace.c, "the buffers"). */
    uint8_t *trace_ring;
    uint32_t trace_seq;
    uint32_t trace_held[EVL_BATCH_BUFS];
    _Alignas(8) uint8_t trace_spill[EVL_BATCH_BYTES];
};

extern __thread evl_loop *evl__tls_loop;

static inline bool evl__debug(const evl_loop *loop) { return loop->flags & EVL_LOOP_DEBUG; }
uint64_t evl__clock_now(void);
/* The loop's time (loop->now): the real clock is read at its first use
 * after a poll (now_stale), not at every poll -- a loop without timers
 * that nobody asks the time reads no clock (a vDSO call a message on the
 * ping-pong path). */
static inline uint64_t evl__loop_now(evl_loop *loop)
{
    if (loop->now_stale) {
        loop->now = evl__clock_now();
        loop->now_stale = 0;
    }
    return loop->now;
}
void evl__warn(evl_loop *loop, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Queue h on loop from any thread, waking the loop. */
void evl__post(evl_loop *loop, evl__handle *h);
/* Loop thread: move posted handles to the ready queue (the locked part
 * out of line: evl__drain_posted_locked, when something was posted). */
void evl__drain_posted_locked(evl_loop *loop);
static inline void evl__drain_posted(evl_loop *loop)
{
    if (atomic_load_explicit(&loop->ts_pending, memory_order_acquire))
        evl__drain_posted_locked(loop);
}
evl__cbhandle *evl__cbhandle_get(evl_loop *loop);
/* Back to the loop's free list (no user code may touch c afterwards). */
void evl__cbhandle_put(evl_loop *loop, evl__cbhandle *c);
/* fd's entry, the table grown to hold it; NULL without memory. */
evl__fdent *evl__fd_get_slow(evl_loop *loop, int fd);
static inline evl__fdent *evl__fd_get(evl_loop *loop, int fd)
{
    if (EVL__LIKELY(fd >= 0 && fd < loop->nfds))
        return &loop->fds[fd];
    return evl__fd_get_slow(loop, fd);
}
void evl__poll_forget(evl_loop *loop, int fd);
void evl__task_wakeup_run(evl__handle *h);
void evl__task_wake_traced(evl_loop *loop, evl__task *t, evl_future *f);
void evl__job_free(evl_future *f);
void evl__job_cancel(evl_future *f);

#include "trace.h"

/* The hot paths' small functions, inline (the profile of examples/
 * http_server, tests/bench/README.md "HTTP at the floor"). */

static inline evl__task *evl__current_task(void)
{
    evl_loop *loop = evl__tls_loop;
    return loop ? loop->current : NULL;
}

/* A done-callback of f is the wakeup of task t: its state and the wake
 * event (task.c). */
static inline void evl__task_wake_probe(evl__task *t, evl_future *f)
{
    evl_loop *loop = t->fut.loop;
    t->tstate = EVL_TASK_READY;
    if (EVL__TRACING(loop))
        evl__task_wake_traced(loop, t, f);
}

static inline bool evl__timers_next(const evl_loop *loop, uint64_t *deadline)
{
    if (loop->timers.n == 0)
        return false;
    *deadline = loop->timers.a[0].deadline;
    return true;
}

static inline void evl__timers_run_due(evl_loop *loop)
{
    if (loop->timers.n > 0)
        evl__timers_fire_due(loop);
}

#endif /* EVL_INTERNAL_H */
