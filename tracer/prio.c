/*
 * prio.c -- `--priority`: how the recorder's thread shares the CPU.
 *
 * On a machine the service keeps busy, every microsecond the recorder runs
 * is taken from the service or its clients, and a loaded server's p99
 * follows how long it waits for a CPU the recorder holds
 * (tests/bench/results/burst_latency.txt).
 *
 * idle (record's default): SCHED_IDLE while recording.  The thread gets
 * the CPU time no normal task wants, and a normal task woken on its CPU
 * preempts it at once.  On the 2-CPU benchmark machine (http_server under
 * wrk) the server's p99 went from 0.20 to 0.28 ms with it, against 0.38 ms
 * as SCHED_BATCH (tests/bench/results/http_overhead_idle.txt; tracer/
 * README.md, "Sharing the CPU").
 *
 * A SCHED_IDLE thread is starved on a saturated machine, and the ring
 * buffer would then fill and drop.  A watchdog thread (normal policy,
 * asleep but for a wakeup every LS_PRIO_CHECK_NS) raises it back to
 * SCHED_OTHER when the ring holds more than a quarter of its size (read
 * from the ring's own producer and consumer positions; LS_PRIO_KEPT_BACKLOG
 * when the target keeps its batches), or when the thread
 * has not come round its loop (ls_prio_beat; at least every 20 ms when it
 * runs) for LS_PRIO_STALL_NS, so that stopping, a flight trigger or `top`
 * are late by that much at most.  Starved for less, it loses nothing: the
 * ring holds seconds of a busy server's records (kept batches: the loop's
 * 256 buffers hold about 1.4 s of them).  Once raised it stays so
 * for LS_PRIO_HOLD_NS and until a drain empties the ring, then yields
 * again.  Counted: meta priority_raises.  A raise is dear (raised, the
 * recorder holds the service's CPU for milliseconds while the service,
 * woken there, waits), so an idle recorder's drains must keep up with
 * the ring on the time it gets (engine.c, LS_DRAIN_IDLE_NS): raises are
 * for a machine with no time to spare at all.
 *
 * batch (top's default, which redraws each second and would stall that
 * long when starved): SCHED_BATCH while recording.  It never preempts on
 * wakeup: woken on the service's CPU it waits for the service to sleep,
 * for its time slice to end or for the other CPU, and then holds that CPU
 * for a whole drain while the service waits.  It keeps a normal thread's
 * share of the CPU otherwise: it is never starved.
 *
 * normal: the thread as it was started. */
#define _GNU_SOURCE
#include "recorder.h"

#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

const char *const ls_prio_names[3] = { "normal", "idle", "batch" };

#define LS_PRIO_CHECK_NS 50000000ll    /* the watchdog's period */
#define LS_PRIO_STALL_NS 1000000000ll  /* no turn of the loop for this long: raise */
#define LS_PRIO_HOLD_NS 1000000000ll   /* raised for at least this long */
/* A loop that keeps its batches until the recorder reads them lends it
 * EVL_BATCH_BUFS buffers; only where each is goes through the ring
 * (ingest.c, ls_read_batch).  The backlog that raises the thread is then a
 * quarter of those messages: the loop would start dropping records at
 * four times as many. */
#define LS_PRIO_KEPT_BACKLOG ((EVL_BATCH_BUFS / 4) * (uint64_t)(sizeof(struct ls_msg_hdr) + \
                                                               sizeof(struct ls_batch_ref) + 8))

static void prio_set(ls_prio *p, bool idle)
{
    struct sched_param sp = { 0 };
    pthread_mutex_lock(&p->mu);
    if (p->idle != idle && sched_setscheduler(p->tid, idle ? SCHED_IDLE : SCHED_OTHER, &sp) == 0)
        atomic_store(&p->idle, idle);
    pthread_mutex_unlock(&p->mu);
}

static void *prio_watchdog(void *arg)
{
    ls_prio *p = arg;
    uint64_t last = atomic_load(&p->beat);
    int64_t last_change = ls_now();
    struct timespec ts = { 0, LS_PRIO_CHECK_NS };
    while (!atomic_load(&p->stop)) {
        nanosleep(&ts, NULL);
        uint64_t beat = atomic_load(&p->beat);
        int64_t now = ls_now();
        if (beat != last) {
            last = beat;
            last_change = now;
        }
        if (!atomic_load(&p->idle) || atomic_load(&p->stop))
            continue;
        /* positions the kernel and libbpf advance: read, never trusted
         * beyond deciding a priority */
        uint64_t backlog = p->prod ? __atomic_load_n(p->prod, __ATOMIC_ACQUIRE) -
                                     __atomic_load_n(p->cons, __ATOMIC_ACQUIRE) : 0;
        uint64_t limit = atomic_load_explicit(&p->kept, memory_order_relaxed)
                             ? LS_PRIO_KEPT_BACKLOG : p->ring_bytes / 4;
        if (backlog > limit || now - last_change >= LS_PRIO_STALL_NS) {
            prio_set(p, false);
            if (!atomic_load(&p->idle)) {
                atomic_store(&p->raised_at, now);
                atomic_fetch_add(&p->raises, 1);
            }
        }
    }
    return NULL;
}

static void prio_release(ls_prio *p)
{
    pthread_mutex_destroy(&p->mu);
    long pg = sysconf(_SC_PAGESIZE);
    if (p->prod) {
        munmap((void *)p->cons, (size_t)pg);
        munmap((void *)p->prod, (size_t)pg);
        p->cons = p->prod = NULL;
    }
}

int ls_prio_start(ls_prio *p, pid_t tid, const struct bpf_map *ring)
{
    memset(p, 0, sizeof(*p));
    p->tid = tid;
    p->ring_bytes = bpf_map__max_entries(ring);
    int ring_fd = bpf_map__fd(ring);
    /* The ring buffer map's first page holds the consumer position, the
     * second the producer's (the layout libbpf maps too).  Without them
     * only a stalled loop raises the thread. */
    long pg = sysconf(_SC_PAGESIZE);
    void *c = mmap(NULL, (size_t)pg, PROT_READ, MAP_SHARED, ring_fd, 0);
    void *q = c == MAP_FAILED ? MAP_FAILED
                              : mmap(NULL, (size_t)pg, PROT_READ, MAP_SHARED, ring_fd, pg);
    if (q != MAP_FAILED) {
        p->cons = c;
        p->prod = q;
    } else if (c != MAP_FAILED) {
        munmap(c, (size_t)pg);
    }
    pthread_mutex_init(&p->mu, NULL);
    prio_set(p, true);
    /* The watchdog of normal policy, said explicitly: a thread inherits
     * its creator's, and its creator is now SCHED_IDLE.  It once was
     * idle too, starved with the thread it watches on a busy machine
     * (seen as a loop losing seconds of records beside CPU hogs). */
    pthread_attr_t a;
    struct sched_param sp = { 0 };
    bool made = false;
    if (atomic_load(&p->idle) && pthread_attr_init(&a) == 0) {
        made = pthread_attr_setinheritsched(&a, PTHREAD_EXPLICIT_SCHED) == 0 &&
               pthread_attr_setschedpolicy(&a, SCHED_OTHER) == 0 &&
               pthread_attr_setschedparam(&a, &sp) == 0 &&
               pthread_create(&p->watchdog, &a, prio_watchdog, p) == 0;
        pthread_attr_destroy(&a);
    }
    if (made) {
        p->started = p->used = true;
        return 0;
    }
    prio_set(p, false);            /* no SCHED_IDLE here, or no watchdog: as it was */
    prio_release(p);
    return -1;
}

int ls_prio_batch(ls_prio *p, pid_t tid)
{
    struct sched_param sp = { 0 };
    memset(p, 0, sizeof(*p));
    p->tid = tid;
    p->batch = p->batch_set = sched_setscheduler(tid, SCHED_BATCH, &sp) == 0;
    return p->batch ? 0 : -1;
}

void ls_prio_beat(ls_prio *p, bool caught_up)
{
    if (!p->started)
        return;
    atomic_fetch_add_explicit(&p->beat, 1, memory_order_relaxed);
    if (caught_up && !atomic_load_explicit(&p->idle, memory_order_relaxed) &&
        ls_now() - atomic_load(&p->raised_at) >= LS_PRIO_HOLD_NS)
        prio_set(p, true);
}

void ls_prio_stop(ls_prio *p)
{
    if (p->batch_set) {               /* the end (drain, derive) as a normal thread */
        struct sched_param sp = { 0 };
        sched_setscheduler(p->tid, SCHED_OTHER, &sp);
        p->batch_set = false;
    }
    if (!p->started)
        return;
    atomic_store(&p->stop, true);
    pthread_join(p->watchdog, NULL);
    prio_set(p, false);            /* the end (drain, derive) at full speed */
    prio_release(p);
    p->started = false;
}
