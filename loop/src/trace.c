/*
 * trace.c -- the slow paths of trace.h: fire an event's USDT probe and, while
 * a tracer raised the batch semaphore, append its record to the loop's
 * batch buffer (evl-probes.h explains batching).  Only reached while some
 * tracer is attached; kept out of line and cold so that the event sites in
 * the loop stay small.
 */
#include "evl-internal.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

/* ------------------------------------------------ the records' clock */

/* Whether the TSC may stand in for the clock between anchors: invariant
 * (it ticks at one rate in every power state: CPUID 0x80000007 EDX bit 8),
 * readable (a process may make RDTSC fault: PR_SET_TSC), and not turned
 * off by the environment (EVL_TRACE_TSC=0: every record reads the clock).
 * Asked once a process; a race only asks twice. */
static bool evl__tsc_usable(void)
{
    static int known = -1;
    int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (v < 0) {
        v = 0;
#if defined(__x86_64__)
        unsigned a, b, c, d;
        int tsc_mode = PR_TSC_ENABLE;
        const char *env = getenv("EVL_TRACE_TSC");
        if ((!env || strcmp(env, "0")) && __get_cpuid(0x80000007, &a, &b, &c, &d) &&
            (d & (1u << 8)) &&
            (prctl(PR_GET_TSC, &tsc_mode, 0, 0, 0) != 0 || tsc_mode == PR_TSC_ENABLE))
            v = 1;
#endif
        __atomic_store_n(&known, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* The clock now, and the TSC at the same instant (*tsc): the middle of
 * the two TSC reads around the clock read, of the tightest of a few tries
 * (on a virtual machine a try can be stretched by the hypervisor, and
 * an anchor's error over its span is an error of the rate). */
#if defined(__x86_64__)
static uint64_t evl__tc_pair(uint64_t *tsc)
{
    uint64_t ns = 0, best = UINT64_MAX;
    for (int i = 0; i < 4; i++) {
        uint64_t t0 = __builtin_ia32_rdtsc();
        uint64_t n = evl__clock_ns();
        uint64_t t1 = __builtin_ia32_rdtsc();
        if (t1 - t0 < best) {
            best = t1 - t0;
            ns = n;
            *tsc = t0 + best / 2;
        }
    }
    return ns;
}
#endif

/* A new anchor: the clock now and the TSC with it (or the clock alone,
 * without a usable TSC), which it returns.  Once the previous anchor is
 * EVL__TC_CALIBRATE_NS old (and at most 1 s: a longer span says nothing
 * more), the rate between the two becomes the rate; until the first rate,
 * the first anchor stays. */
static uint64_t evl__tc_anchor(evl_loop *loop)
{
#if defined(__x86_64__)
    if (!evl__tsc_usable())
        return evl__clock_ns();
    if (loop->tc_ns && !loop->tc_span) {  /* calibrating: keep the first anchor */
        uint64_t ns = evl__clock_ns();
        if (ns - loop->tc_ns < EVL__TC_CALIBRATE_NS)
            return ns;
    }
    uint64_t tsc = 0;
    uint64_t ns = evl__tc_pair(&tsc);
    uint64_t span = ns - loop->tc_ns, ticks = tsc - loop->tc_tsc;
    if (loop->tc_ns && span >= EVL__TC_CALIBRATE_NS && span <= 1000000000ull &&
        (int64_t)ticks > 0) {
        uint64_t mult = (uint64_t)(((unsigned __int128)span << 32) / ticks);
        /* a TSC of 100 MHz to 20 GHz, or something is wrong: no TSC */
        bool sane = mult >= (1ull << 32) / 20 && mult <= (10ull << 32);
        loop->tc_mult = sane ? mult : 0;
        loop->tc_span = sane ? (EVL__TC_ANCHOR_NS << 32) / mult : 0;
    }
    loop->tc_ns = ns;
    loop->tc_tsc = tsc;
    return ns;
#else
    (void)loop;
    return evl__clock_ns();
#endif
}

/* A record's time from the clock itself (trace.h, evl__trace_now). */
uint64_t evl__trace_anchor(evl_loop *loop)
{
    uint64_t ns = evl__tc_anchor(loop);
    if (ns < loop->tc_last)
        ns = loop->tc_last;
    return loop->tc_last = ns;
}

/* Before a batch goes out: if the TSC ran ahead of the clock, the records
 * later than the clock now are brought back to it (they stay in order),
 * and a new anchor is taken. */
void evl__trace_settle(evl_loop *loop)
{
    uint64_t now = evl__clock_ns();
    if (EVL__LIKELY(loop->tc_last <= now))
        return;
    for (uint32_t off = 0; off < loop->trace_len;) {
        struct evl_rec *r = (struct evl_rec *)(void *)(loop->trace_buf + off);
        if (r->ts > now)
            r->ts = now;
        off += r->size;
    }
    loop->tc_last = now;
    evl__tc_anchor(loop);
}

/* ------------------------------------------------ the buffers (evl-probes.h)
 *
 * trace_held[k] is the seq of the last batch handed over in buffer k (0:
 * none): free once the tracer's released has reached it.  The loop takes
 * the lowest free buffer, so that a tracer that keeps up touches only the
 * first few (the rest of the mapping stays untouched, not resident).
 * released is the tracer's word, so it is only compared: whatever it
 * holds, the loop writes only into its own buffers. */

#define EVL__RING_BYTES ((size_t)EVL_BATCH_BUFS * EVL_BATCH_BYTES)

static uint32_t evl__trace_released(const evl_loop *loop)
{
    return __atomic_load_n(&loop->pub.released, __ATOMIC_ACQUIRE);
}

/* The lowest free buffer, or -1 if the tracer holds them all. */
static int evl__trace_free_slot(const evl_loop *loop)
{
    if (!loop->trace_ring)
        return -1;
    uint32_t rel = evl__trace_released(loop);
    for (int k = 0; k < EVL_BATCH_BUFS; k++)
        if (!loop->trace_held[k] || (int32_t)(loop->trace_held[k] - rel) <= 0)
            return k;
    return -1;
}

static void evl__trace_use(evl_loop *loop, int k)
{
    loop->trace_buf = loop->trace_ring + (size_t)k * EVL_BATCH_BYTES;
}

/* Does the tracer read batches after the probe returns (evl_loop_pub.reader)? */
static bool evl__trace_keeps(const evl_loop *loop)
{
    return loop->trace_ring && __atomic_load_n(&loop->pub.reader, __ATOMIC_RELAXED);
}

EVL__COLD void evl__trace_hand_over(evl_loop *loop)
{
    bool keep = evl__trace_keeps(loop);
    if (keep && loop->trace_buf == loop->trace_spill) {
        int k = evl__trace_free_slot(loop);
        if (k < 0) {
            /* The tracer still holds every buffer: the spill's records are
             * lost, and an empty batch tells it where the loop is. */
            loop->pub.lost += loop->trace_nrec;
            loop->trace_len = loop->trace_nrec = 0;
            EVL_PROBE(batch, loop->id, (uintptr_t)loop->trace_buf, 0, (uintptr_t)&loop->pub, 0,
                      loop->trace_seq);
            return;
        }
        evl__trace_use(loop, k);
        memcpy(loop->trace_buf, loop->trace_spill, loop->trace_len);
    }
    evl__trace_settle(loop);
    uint32_t seq = 0;                 /* 0: copy it now, the buffer is reused */
    if (keep) {
        if (++loop->trace_seq == 0)
            loop->trace_seq = 1;
        seq = loop->trace_seq;
    }
    EVL_PROBE(batch, loop->id, (uintptr_t)loop->trace_buf, loop->trace_len,
              (uintptr_t)&loop->pub, loop->trace_nrec, seq);
    (void)seq;
    loop->trace_len = 0;
    loop->trace_nrec = 0;
    if (!keep)
        return;
    /* kept batches are handed over from a buffer of the ring, never the spill */
    loop->trace_held[(size_t)(loop->trace_buf - loop->trace_ring) / EVL_BATCH_BYTES] = seq;
    int k = evl__trace_free_slot(loop);
    if (k >= 0)
        evl__trace_use(loop, k);
    else
        loop->trace_buf = loop->trace_spill;
}

EVL__COLD void evl__trace_begin(evl_loop *loop)
{
    if (!loop->trace_ring) {
        void *p = mmap(NULL, EVL__RING_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        loop->trace_ring = p == MAP_FAILED ? NULL : p;
    }
    /* no tracer was attached: none holds a buffer, none has said it reads
     * kept batches */
    __atomic_store_n(&loop->pub.released, loop->trace_seq, __ATOMIC_RELEASE);
    __atomic_store_n(&loop->pub.reader, 0, __ATOMIC_RELAXED);
    memset(loop->trace_held, 0, sizeof(loop->trace_held));
    loop->trace_buf = loop->trace_ring ? loop->trace_ring : loop->trace_spill;
    loop->trace_len = loop->trace_nrec = 0;
}

EVL__COLD void evl__trace_end(evl_loop *loop, bool unmap)
{
    loop->trace_len = loop->trace_nrec = 0;
    if (loop->trace_ring && (unmap || evl__trace_released(loop) == loop->trace_seq)) {
        munmap(loop->trace_ring, EVL__RING_BYTES);
        loop->trace_ring = NULL;
    }
    loop->trace_buf = loop->trace_spill;
}

/* Sleep a millisecond unless the time is past until: false then. */
static bool evl__trace_wait(uint64_t until)
{
    if (evl__clock_ns() >= until)
        return false;
    struct timespec ts = { 0, 1000000 };
    nanosleep(&ts, NULL);
    return true;
}

EVL__COLD void evl__trace_drain(evl_loop *loop)
{
    if (!EVL_BATCHING())
        return;
    uint64_t until = evl__clock_ns() + EVL_TRACE_DRAIN_NS;
    /* records in the spill: a buffer to hand them over in first */
    while (evl__trace_keeps(loop) && loop->trace_buf == loop->trace_spill && loop->trace_len &&
           evl__trace_free_slot(loop) < 0 && evl__trace_wait(until))
        ;
    evl__trace_flush(loop);
    while (evl__trace_keeps(loop) && evl__trace_released(loop) != loop->trace_seq &&
           evl__trace_wait(until))
        ;
}

#define EVL__REC(loop, name, task, a32, a0, a1)                                \
    do {                                                                      \
        if (EVL_BATCHING())                                                   \
            evl__trace_rec(loop, EVL_PROBE_ID_##name, sizeof(struct evl_rec), \
                           task, a32, a0, a1);                                \
    } while (0)

EVL__COLD void evl__rec_task_create(evl_loop *loop, uint64_t task, uint64_t parent,
                                    const char *name, uintptr_t fn, uint32_t flags)
{
    size_t n = strlen(name);
    uint16_t size = (uint16_t)(sizeof(struct evl_rec) + ((n + 7) & ~(size_t)7));
    struct evl_rec *r = evl__trace_rec(loop, EVL_PROBE_ID_task_create, size, task,
                                       (uint32_t)n | flags, parent, fn);
    memcpy(r + 1, name, n);
}

EVL__COLD void evl__tr_task_create_slow(evl_loop *loop, uint64_t task, uint64_t parent,
                                        const char *name, uintptr_t fn)
{
    EVL_PROBE(task_create, loop->id, task, parent, name, fn);
    if (EVL_BATCHING())
        evl__rec_task_create(loop, task, parent, name, fn, 0);
}

EVL__COLD void evl__tr_task_run_slow(evl_loop *loop, uint64_t task)
{
    EVL_PROBE(task_run, loop->id, task);
    if (EVL_BATCHING())
        loop->pub.since = evl__trace_rec(loop, EVL_PROBE_ID_task_run, sizeof(struct evl_rec),
                                         task, 0, 0, 0)->ts;
}

EVL__COLD void evl__tr_task_suspend_slow(evl_loop *loop, uint64_t task, int reason,
                                         uint64_t obj, uint64_t timeout)
{
    EVL_PROBE(task_suspend, loop->id, task, reason, obj, timeout);
    EVL__REC(loop, task_suspend, task, (uint32_t)reason, obj, timeout);
}

/* One clock read for both records of a yield. */
EVL__COLD void evl__tr_task_yield_slow(evl_loop *loop, uint64_t task)
{
    EVL_PROBE(task_suspend, loop->id, task, EVL_SUSPEND_YIELD, 0, 0);
    EVL_PROBE(task_wake, loop->id, task, EVL_WAKER_YIELD, task);
    if (EVL_BATCHING()) {
        struct evl_rec *r = evl__trace_rec(loop, EVL_PROBE_ID_task_suspend, sizeof(*r), task,
                                           EVL_SUSPEND_YIELD, 0, 0);
        uint64_t ts = r->ts;
        evl__trace_rec_at(loop, EVL_PROBE_ID_task_wake, sizeof(*r), task, EVL_WAKER_YIELD,
                          task, 0, ts);
    }
}

EVL__COLD void evl__tr_task_wake_slow(evl_loop *loop, uint64_t task, int kind, uint64_t waker)
{
    EVL_PROBE(task_wake, loop->id, task, kind, waker);
    EVL__REC(loop, task_wake, task, (uint32_t)kind, waker, 0);
}

EVL__COLD void evl__tr_task_finish_slow(evl_loop *loop, uint64_t task, int state, intptr_t err)
{
    EVL_PROBE(task_finish, loop->id, task, state, err);
    EVL__REC(loop, task_finish, task, (uint32_t)state, (uint64_t)err, 0);
}

EVL__COLD void evl__tr_task_cancel_slow(evl_loop *loop, uint64_t task, uint64_t requester)
{
    EVL_PROBE(task_cancel, loop->id, task, requester);
    EVL__REC(loop, task_cancel, task, 0, requester, 0);
}

EVL__COLD void evl__tr_task_leak_slow(evl_loop *loop, uint64_t task, int kind)
{
    EVL_PROBE(task_leak, loop->id, task, kind);
    EVL__REC(loop, task_leak, task, (uint32_t)kind, 0, 0);
}

EVL__COLD int64_t evl__tr_poll_enter_slow(evl_loop *loop, int64_t timeout)
{
    EVL_PROBE(poll_enter, loop->id, timeout);
    if (!EVL_BATCHING())
        return timeout;
    uint64_t now = evl__trace_rec(loop, EVL_PROBE_ID_poll_enter, sizeof(struct evl_rec), 0, 0,
                                  (uint64_t)timeout, 0)->ts;
    /* The records go to the tracer once the oldest has waited
     * EVL_TRACE_FLUSH_NS; until then a poll sleeps no longer than that
     * (the record keeps the timeout the loop asked for). */
    uint64_t age = now - evl__trace_first(loop);
    if (age >= EVL_TRACE_FLUSH_NS) {
        evl__trace_flush(loop);
        return timeout;
    }
    int64_t left = (int64_t)(EVL_TRACE_FLUSH_NS - age);
    return timeout < 0 || timeout > left ? left : timeout;
}

EVL__COLD void evl__tr_poll_exit_slow(evl_loop *loop, int n)
{
    EVL_PROBE(poll_exit, loop->id, n);
    EVL__REC(loop, poll_exit, 0, (uint32_t)n, 0, 0);
}

EVL__COLD void evl__tr_callback_begin_slow(evl_loop *loop, uintptr_t fn)
{
    EVL_PROBE(callback_begin, loop->id, fn);
    if (EVL_BATCHING())
        loop->pub.since = evl__trace_rec(loop, EVL_PROBE_ID_callback_begin,
                                         sizeof(struct evl_rec), 0, 0, fn, 0)->ts;
}

EVL__COLD void evl__tr_callback_end_slow(evl_loop *loop, uintptr_t fn)
{
    EVL_PROBE(callback_end, loop->id, fn);
    EVL__REC(loop, callback_end, 0, 0, fn, 0);
}
