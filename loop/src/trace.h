/*
 * trace.h -- one inline function per lifecycle event: it fires the event's
 * own USDT probe (for bpftrace and friends) and, while a tracer has raised
 * the batch semaphore, appends a record to the loop's batch buffer
 * (evl-probes.h explains batching).  Included by evl-internal.h only.
 */
#ifndef EVL_TRACE_H
#define EVL_TRACE_H

#include <string.h>
#include <time.h>

#define EVL_BATCHING() EVL_PROBE_ENABLED(batch)


/* Hand the buffer to the tracer, even empty (a no-op when nobody
 * listens), and go on in the next free one (trace.c).  Before, settle:
 * no record's time may be later than the clock's. */
void evl__trace_hand_over(evl_loop *loop);
void evl__trace_settle(evl_loop *loop);

/* Batching starts: the buffers, all free.  Batching stops: unmapped if
 * the tracer has read them all or if unmap (the loop is freed), else kept
 * for the loop's next tracer (trace.c). */
void evl__trace_begin(evl_loop *loop);
void evl__trace_end(evl_loop *loop, bool unmap);

/* Hand over what is buffered and wait, EVL_TRACE_DRAIN_NS at most, until
 * the tracer has read every batch (evl_run's return, evl_loop_free). */
void evl__trace_drain(evl_loop *loop);

/* The same unless the buffer is empty. */
static inline void evl__trace_flush(evl_loop *loop)
{
    if (loop->trace_len)
        evl__trace_hand_over(loop);
}

/* The record writer, inlined into each slow path of trace.c (they are
 * cold, so without always_inline the compiler would call one shared copy,
 * and pay a call and six saved registers a record).  It reserves size
 * bytes (a multiple of 8) for a record and fills all but its time, handing
 * the buffer over first if it is full.  The buffer's oldest record is its
 * first, so its time needs no field of its own (evl__tr_poll_enter_slow). */
#define EVL__INLINE inline __attribute__((always_inline))
static EVL__INLINE struct evl_rec *evl__trace_put(evl_loop *loop, uint16_t kind, uint16_t size,
                                                  uint64_t task, uint32_t a32, uint64_t a0,
                                                  uint64_t a1)
{
    if (EVL__UNLIKELY(loop->trace_len + size > EVL_BATCH_BYTES))
        evl__trace_flush(loop);
    struct evl_rec *r = (struct evl_rec *)(void *)(loop->trace_buf + loop->trace_len);
    r->task = task;
    r->a0 = a0;
    r->a1 = a1;
    r->a32 = a32;
    r->kind = kind;
    r->size = size;
    loop->trace_len += size;
    loop->trace_nrec++;
    return r;
}

/* The records' clock: CLOCK_MONOTONIC in ns, as the kernel stamps the
 * events a tracer sees beside them, but without a clock_gettime per
 * record (most of a record's cost: tests/bench/results/trace_clock_ab.txt).
 * On x86-64 with an invariant TSC a record's time is the last anchor (a
 * clock_gettime and a TSC read taken together) plus the TSC ticks since,
 * scaled by the rate measured between the last two anchors.  An anchor
 * serves EVL__TC_ANCHOR_NS at most, then the next record takes a new one
 * (evl__trace_anchor, trace.c); so does a record while the rate is unknown
 * (the first EVL__TC_CALIBRATE_NS of a recording), or whose TSC reads
 * behind the anchor's (another CPU's).
 * Times never go backwards, and a batch is never handed over holding a
 * time later than the clock then (evl__trace_flush): what a tracer checks
 * of a record's time still holds.  The error otherwise is the rate's
 * change over one anchor (loop/README.md, "The records' clock"). */
#define EVL__TC_ANCHOR_NS 20000000ull     /* 20 ms */
#define EVL__TC_CALIBRATE_NS 1000000ull   /* 1 ms */
uint64_t evl__trace_anchor(evl_loop *loop);

static inline uint64_t evl__clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static EVL__INLINE uint64_t evl__trace_now(evl_loop *loop)
{
#if defined(__x86_64__)
    if (EVL__LIKELY(loop->tc_span)) { /* calibrated (else no TSC read) */
        uint64_t d = __builtin_ia32_rdtsc() - loop->tc_tsc;
        if (EVL__LIKELY(d <= loop->tc_span)) {
            /* d * tc_mult <= EVL__TC_ANCHOR_NS * 2^32: no overflow */
            uint64_t t = loop->tc_ns + ((d * loop->tc_mult) >> 32);
            if (EVL__UNLIKELY(t < loop->tc_last))
                t = loop->tc_last;
            return loop->tc_last = t;
        }
    }
#endif
    return evl__trace_anchor(loop);
}

/* A record stamped ts. */
static EVL__INLINE struct evl_rec *evl__trace_rec_at(evl_loop *loop, uint16_t kind,
                                                     uint16_t size, uint64_t task,
                                                     uint32_t a32, uint64_t a0, uint64_t a1,
                                                     uint64_t ts)
{
    struct evl_rec *r = evl__trace_put(loop, kind, size, task, a32, a0, a1);
    r->ts = ts;
    return r;
}

/* A record stamped now: filled first and stamped last, so that only its
 * address lives across the clock call. */
static EVL__INLINE struct evl_rec *evl__trace_rec(evl_loop *loop, uint16_t kind, uint16_t size,
                                                  uint64_t task, uint32_t a32, uint64_t a0,
                                                  uint64_t a1)
{
    struct evl_rec *r = evl__trace_put(loop, kind, size, task, a32, a0, a1);
    r->ts = evl__trace_now(loop);
    return r;
}

/* The time of the oldest record waiting in the buffer (trace_len > 0). */
static inline uint64_t evl__trace_first(const evl_loop *loop)
{
    return ((const struct evl_rec *)(const void *)loop->trace_buf)->ts;
}

/* The hot path of every event is one test of a byte of the loop, which
 * the event site has in hand: is any lifecycle probe enabled?  The slow
 * paths (trace.c, out of line and cold) then fire each probe only if its
 * own semaphore is up, and record only while batching.  The byte is the OR
 * of the semaphores (evl__trace_refresh), taken once an iteration, after
 * its poll and before its callbacks (evl__trace_check_attach, loop.c), and
 * in evl_loop_new and evl_loop_free: a tracer attaching to a running loop
 * sees events from the end of the next poll (the batch tracer too, with
 * its snapshot), and a detached one costs each event a load from a cache
 * line already in use and a branch, instead of two loads from the
 * semaphores' line.  The refresh is four loads from one line: the
 * semaphores are one 32-byte block (probes.c). */
#ifdef EVL_PROBES
#define EVL__TRACING(loop) EVL__UNLIKELY((loop)->tracing)
typedef uint64_t __attribute__((may_alias)) evl__sem_word;
extern volatile const evl__sem_word evl__semaphores[4];
static inline void evl__trace_refresh(evl_loop *loop)
{
    loop->tracing = (evl__semaphores[0] | evl__semaphores[1] | evl__semaphores[2] |
                     evl__semaphores[3]) != 0;
}
#else
#define EVL__TRACING(loop) 0
static inline void evl__trace_refresh(evl_loop *loop) { (void)loop; }
#endif

void evl__tr_task_create_slow(evl_loop *loop, uint64_t task, uint64_t parent,
                              const char *name, uintptr_t fn);
void evl__tr_task_run_slow(evl_loop *loop, uint64_t task);
void evl__tr_task_suspend_slow(evl_loop *loop, uint64_t task, int reason, uint64_t obj,
                               uint64_t timeout);
void evl__tr_task_yield_slow(evl_loop *loop, uint64_t task);
void evl__tr_task_wake_slow(evl_loop *loop, uint64_t task, int kind, uint64_t waker);
void evl__tr_task_finish_slow(evl_loop *loop, uint64_t task, int state, intptr_t err);
void evl__tr_task_cancel_slow(evl_loop *loop, uint64_t task, uint64_t requester);
void evl__tr_task_leak_slow(evl_loop *loop, uint64_t task, int kind);
int64_t evl__tr_poll_enter_slow(evl_loop *loop, int64_t timeout);
void evl__tr_poll_exit_slow(evl_loop *loop, int n);
void evl__tr_callback_begin_slow(evl_loop *loop, uintptr_t fn);
void evl__tr_callback_end_slow(evl_loop *loop, uintptr_t fn);
void evl__rec_task_create(evl_loop *loop, uint64_t task, uint64_t parent, const char *name,
                          uintptr_t fn, uint32_t flags);

/* Once per iteration, after the poll: a tracer that just attached (or
 * asked through pub.snapshot_req) first learns the tasks that already
 * exist, before any callback of the iteration runs. */
void evl__trace_snapshot(evl_loop *loop, bool fresh);
void evl__trace_attach_slow(evl_loop *loop);
static inline void evl__trace_check_attach(evl_loop *loop)
{
    evl__trace_refresh(loop);
    if (EVL__UNLIKELY(loop->tracing | loop->trace_on))
        evl__trace_attach_slow(loop);
}

/* A task step or callback begins: publish it (evl_loop_pub; `since` is
 * stamped by the slow path, only while tracing). */
static inline void evl__pub_begin(evl_loop *loop, uint64_t task, uint32_t phase)
{
    loop->pub.task = task;
    loop->pub.phase = phase;
    loop->pub.steps++;
}

static inline void evl__tr_task_create(evl_loop *loop, uint64_t task, uint64_t parent,
                                       const char *name, uintptr_t fn)
{
    if (EVL__TRACING(loop))
        evl__tr_task_create_slow(loop, task, parent, name, fn);
}

static inline void evl__tr_task_run(evl_loop *loop, uint64_t task)
{
    evl__pub_begin(loop, task, EVL_PHASE_TASK);
    if (EVL__TRACING(loop))
        evl__tr_task_run_slow(loop, task);
}

static inline void evl__tr_task_suspend(evl_loop *loop, uint64_t task, int reason,
                                        uint64_t obj, uint64_t timeout)
{
    if (EVL__TRACING(loop))
        evl__tr_task_suspend_slow(loop, task, reason, obj, timeout);
}

/* sleep(0): suspended and woken at once. */
static inline void evl__tr_task_yield(evl_loop *loop, uint64_t task)
{
    if (EVL__TRACING(loop))
        evl__tr_task_yield_slow(loop, task);
}

static inline void evl__tr_task_wake(evl_loop *loop, uint64_t task, int kind, uint64_t waker)
{
    if (EVL__TRACING(loop))
        evl__tr_task_wake_slow(loop, task, kind, waker);
}

static inline void evl__tr_task_finish(evl_loop *loop, uint64_t task, int state, intptr_t err)
{
    if (EVL__TRACING(loop))
        evl__tr_task_finish_slow(loop, task, state, err);
}

static inline void evl__tr_task_cancel(evl_loop *loop, uint64_t task, uint64_t requester)
{
    if (EVL__TRACING(loop))
        evl__tr_task_cancel_slow(loop, task, requester);
}

static inline void evl__tr_task_leak(evl_loop *loop, uint64_t task, int kind)
{
    if (EVL__TRACING(loop))
        evl__tr_task_leak_slow(loop, task, kind);
}

/* Returns the timeout to poll with: the loop's own, or while records wait
 * in the batch buffer, cut short so that they are handed over in time. */
static inline int64_t evl__tr_poll_enter(evl_loop *loop, int64_t timeout)
{
    if (EVL__TRACING(loop))
        return evl__tr_poll_enter_slow(loop, timeout);
    return timeout;
}

static inline void evl__tr_poll_exit(evl_loop *loop, int n)
{
    if (EVL__TRACING(loop))
        evl__tr_poll_exit_slow(loop, n);
}

static inline void evl__tr_callback_begin(evl_loop *loop, uintptr_t fn)
{
    evl__pub_begin(loop, 0, EVL_PHASE_CALLBACK);
    if (EVL__TRACING(loop))
        evl__tr_callback_begin_slow(loop, fn);
}

static inline void evl__tr_callback_end(evl_loop *loop, uintptr_t fn)
{
    if (EVL__TRACING(loop))
        evl__tr_callback_end_slow(loop, fn);
    loop->pub.phase = EVL_PHASE_OTHER;
}

#endif /* EVL_TRACE_H */
