/*
 * backlog.c -- storing later what a busy machine sends now.  Part of the
 * recorder (recorder.h).
 *
 * What recording costs a loaded service is, for the most part, the
 * recorder storing what it receives -- decoding records, encoding the
 * event columns, SQLite -- while the service wants every CPU: with the
 * recorder stopped the probes and BPF programs cost http_server 1.01x
 * its throughput and 1.14x its p99 (tests/bench/results/
 * http_overhead_parts.txt), and a recorder that only read and released
 * each kept batch 1.03x and 1.11x, against 0.98x and 1.34x storing it
 * (http_overhead_noingest.txt).  So while the machine's CPUs are busy the
 * recorder reads each kept batch out of the target at once (the loop gets
 * its buffer back) and keeps it, with every message after it, in its own
 * memory; it stores them, in their order, when
 *
 *   - the CPUs have time to spare: over the last LS_SPARE_PERIOD_NS, at
 *     least LS_SPARE_CPUS of idle CPU time per second, the recorder's own
 *     CPU time counted as idle (/proc/stat);
 *   - the backlog would pass its limit (--backlog, LS_BACKLOG_DEFAULT):
 *     the oldest message, for each new one -- under load that
 *     lasts, the recorder stores as it did without a backlog;
 *   - its oldest message is LS_BACKLOG_AGE_NS old: a trace on disk is
 *     never further behind;
 *   - a blocking episode comes (ingest.c): the loop stalled, there is
 *     nothing to spare it.  Everything up to the episode is due, and
 *     stored in slices of at most LS_BACKLOG_SLICE_NS between which the
 *     main loop still reads the ring: stored in one go, a backlog held
 *     the recorder for seconds on a busy machine while the loop, its
 *     buffers not given back, lost what it recorded (tests/README.md,
 *     "Under load");
 *   - recording ends (engine.c), before the trace is finished.
 *
 * Its memory is one arena of --backlog bytes, mapped and touched when
 * recording starts (transparent huge pages where the system allows): the
 * recorder's RSS is that much larger from the start, and no more.  Fresh
 * memory touched in the middle of a burst cost more than the storing it
 * put off (a page fault per 4 KiB read: 188 ns of the recorder's CPU per
 * event while wrk ran, against 62 storing at once; on this VM a fault is
 * dear: http_overhead_backlog_malloc.txt).  The arena holds a ring of
 * slots of one batch each (a message header and EVL_BATCH_BYTES).
 *
 * Only kept batches start a backlog: the first batch of a loop, copied,
 * is stored at once (it tells the loop that we read kept batches), and
 * so is everything while the backlog is empty and the CPUs have time to
 * spare.  While it holds messages back and has room, the main loop
 * (engine.c) reads on a 20 ms timer; full, it drains on the polling timer
 * as it does without a backlog.  Not used with
 * --max-size (the cap is checked against what is stored), --flight-recorder
 * (its own ring in memory) or `top` (it shows what comes as it comes).
 */
#define _GNU_SOURCE
#include "recorder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define LS_SPARE_PERIOD_NS 200000000ll  /* how often the CPUs' idle time is read */
#define LS_SPARE_CPUS 0.5               /* idle CPUs (seconds per second) that make time to spare */
#define LS_BACKLOG_AGE_NS 10000000000ll /* the oldest message waits no longer */
/* Storing from the backlog takes at most this long per turn of the main
 * loop: a loop handing over thousands of batches a second fills the 256
 * buffers it lends in a tenth of a second. */
#define LS_BACKLOG_SLICE_NS 10000000ll

struct ls_backlog {
    uint8_t *mem;             /* the arena: nslots slots of a batch each, mem_size bytes */
    size_t mem_size;
    uint32_t nslots, first, n;  /* the ring of slots: the oldest, how many are held */
    uint32_t due;             /* the oldest n to store now: up to a blocking episode */
    uint64_t bytes, peak;     /* message bytes held now, at most (meta backlog_peak) */
    uint64_t msgs;            /* messages that waited in it (meta backlog_messages) */
    bool spare;               /* the CPUs had time to spare when last read */
    double idle_at;           /* the CPUs' idle seconds then (-1: unknown) */
    int64_t self_at, seen_at; /* the recorder's CPU time then; when */
};

struct ls_slot {
    int64_t t;                        /* when the message came */
    uint64_t size;
    _Alignas(8) uint8_t data[sizeof(struct ls_msg_hdr) + EVL_BATCH_BYTES];
};

static struct ls_slot *slot_at(struct ls_backlog *b, uint32_t i)
{
    return (struct ls_slot *)(void *)(b->mem + (size_t)(i % b->nslots) * sizeof(struct ls_slot));
}

static const ls_hold_ops backlog_hold;

int ls_backlog_open(recorder *r)
{
    if (!r->backlog_limit)
        return 0;
    struct ls_backlog *b = calloc(1, sizeof(*b));
    if (!b)
        return ls_error("out of memory");
    r->backlog = b;
    r->hold = &backlog_hold;
    b->idle_at = -1;
    b->nslots = (uint32_t)(r->backlog_limit / sizeof(struct ls_slot));
    b->mem_size = (size_t)b->nslots * sizeof(struct ls_slot);
    void *p = mmap(NULL, b->mem_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return ls_error("cannot map the backlog's %llu bytes (--backlog): %s",
                        (unsigned long long)b->mem_size, strerror(errno));
    madvise(p, b->mem_size, MADV_HUGEPAGE);
    for (size_t off = 0; off < b->mem_size; off += 4096)
        ((volatile uint8_t *)p)[off] = 0;
    b->mem = p;
    return 0;
}

/* Store the oldest message. */
static void take_oldest(recorder *r)
{
    struct ls_backlog *b = r->backlog;
    struct ls_slot *s = slot_at(b, b->first);
    b->first = (b->first + 1) % b->nslots;
    b->n--;
    b->due -= b->due > 0;
    b->bytes -= s->size;
    ls_take_msg(r, s->data, s->size);
}

static void drain_until(recorder *r, int64_t until, bool due_only);

static void hold_msg(recorder *r, const void *data, size_t size, bool ref)
{
    struct ls_backlog *b = r->backlog;
    const struct ls_msg_hdr *h = data;
    const struct ls_batch_ref *br = NULL;
    if (ref && !(br = ls_batch_ref(r, data, size)))
        return;
    if (!ref && size > sizeof(slot_at(b, 0)->data)) {
        drain_until(r, 0, false);     /* no slot holds it: everything before it, then it */
        ls_take_msg(r, data, size);
        return;
    }
    if (b->n == b->nslots)
        take_oldest(r);           /* full: store as it comes */
    struct ls_slot *s = slot_at(b, b->first + b->n);
    if (ref) {
        if (!ls_read_batch(r, h, br, (struct ls_msg_hdr *)(void *)s->data))
            return;
        size = sizeof(*h) + br->len;
    } else {
        memcpy(s->data, data, size);
    }
    s->t = ls_now();
    s->size = size;
    b->n++;
    b->bytes += size;
    b->msgs++;
    if (b->bytes > b->peak)
        b->peak = b->bytes;
}

static void drain_until(recorder *r, int64_t until, bool due_only)
{
    struct ls_backlog *b = r->backlog;
    while (b->n && (!due_only || b->due) && (!until || ls_now() < until))
        take_oldest(r);
}

/* Idle CPU time per second since the last call, the recorder's own
 * counted as idle; -1 the first time or when /proc/stat is unreadable. */
static double idle_cpus(struct ls_backlog *b, int64_t now)
{
    FILE *f = fopen("/proc/stat", "re");
    unsigned long long v[5] = { 0 };
    int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4]) : 0;
    if (f)
        fclose(f);
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    int64_t self = ts.tv_sec * 1000000000ll + ts.tv_nsec;
    /* idle and iowait, in clock ticks */
    double idle = n == 5 ? (double)(v[3] + v[4]) / (double)sysconf(_SC_CLK_TCK) : -1;
    double spare = -1;
    if (idle >= 0 && b->idle_at >= 0 && now > b->seen_at)
        spare = ((idle - b->idle_at) + (double)(self - b->self_at) / 1e9) /
                ((double)(now - b->seen_at) / 1e9);
    b->idle_at = idle;
    b->self_at = self;
    b->seen_at = now;
    return spare;
}

static bool tick(recorder *r, int64_t now, int64_t slice_ns, bool usr1)
{
    struct ls_backlog *b = r->backlog;
    (void)usr1;
    if (now - b->seen_at >= LS_SPARE_PERIOD_NS)
        b->spare = idle_cpus(b, now) >= LS_SPARE_CPUS && !r->backlog_test_hold;
    if (slice_ns > LS_BACKLOG_SLICE_NS)
        slice_ns = LS_BACKLOG_SLICE_NS;
    if (b->due) {
        drain_until(r, now + slice_ns, true);
        if (b->due)
            return true;              /* the next turn comes at once */
    }
    if (!b->n || (!b->spare && now - slot_at(b, b->first)->t < LS_BACKLOG_AGE_NS))
        return false;
    drain_until(r, now + slice_ns, false);
    return b->n != 0;
}

/* While the CPUs are busy, kept batches wait, and so does all that comes
 * after them; a blocking episode makes everything up to it due (tick). */
static bool take(recorder *r, const void *data, size_t size, bool ref)
{
    struct ls_backlog *b = r->backlog;
    const struct ls_msg_hdr *h = data;
    bool block = size >= sizeof(*h) && h->type == LS_MSG_BLOCK;
    if (!((ref && !b->spare) || b->n))
        return false;
    hold_msg(r, data, size, ref);
    if (block)
        b->due = b->n;
    return true;
}

static bool holding(recorder *r) { return r->backlog->n && r->backlog->n < r->backlog->nslots; }
static uint64_t bytes(recorder *r) { return r->backlog->bytes; }
static void drain(recorder *r) { drain_until(r, 0, false); }

static void meta_start(recorder *r)
{
    ls_sink_meta(r, LS_META_BACKLOG_LIMIT, "%llu", (unsigned long long)r->backlog_limit);
}

static void meta_end(recorder *r)
{
    ls_sink_meta(r, LS_META_BACKLOG_MESSAGES, "%llu", (unsigned long long)r->backlog->msgs);
    ls_sink_meta(r, LS_META_BACKLOG_PEAK, "%llu", (unsigned long long)r->backlog->peak);
}

/* What is still in it is stored by nobody. */
static void backlog_free(recorder *r)
{
    struct ls_backlog *b = r->backlog;
    if (b->mem)
        munmap(b->mem, b->mem_size);
    free(b);
    r->backlog = NULL;
}

static const ls_hold_ops backlog_hold = {
    .name = "backlog",
    .take = take,
    .tick = tick,
    .holding = holding,
    .bytes = bytes,
    .drain = drain,
    .meta_start = meta_start,
    .meta_end = meta_end,
    .free = backlog_free,
};
