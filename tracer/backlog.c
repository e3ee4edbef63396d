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
 * (http_overhead_backlog.txt).  So while the machine's CPUs are busy the
 * recorder reads each kept batch out of the target at once (the loop gets
 * its buffer back) and keeps it, with every message after it, in a FIFO
 * in its own memory; it stores them, in their order, when
 *
 *   - the CPUs have time to spare: over the last LS_SPARE_PERIOD_NS, at
 *     least LS_SPARE_CPUS of idle CPU time per second, the recorder's own
 *     CPU time counted as idle (/proc/stat);
 *   - the backlog would pass its limit (--backlog, LS_BACKLOG_DEFAULT):
 *     the oldest messages, until the new one fits -- under load that
 *     lasts, the recorder stores as it did without a backlog;
 *   - its oldest message is LS_BACKLOG_AGE_NS old: a trace on disk is
 *     never further behind;
 *   - a blocking episode comes (ingest.c): the loop stalled, there is
 *     nothing to spare it, and the episode's stack is best symbolized
 *     while the target still maps what it ran;
 *   - recording ends (record.c), before the trace is finished.
 *
 * Only kept batches start a backlog: the first batch of a loop, copied,
 * is stored at once (it tells the loop that we read kept batches), and
 * so is everything while the backlog is empty.  Not used with --max-size
 * (the cap is checked against what is stored), --flight-recorder (its
 * own ring in memory) or `top` (it shows what comes as it comes).
 */
#define _GNU_SOURCE
#include "recorder.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LS_SPARE_PERIOD_NS 200000000ll  /* how often the CPUs' idle time is read */
#define LS_SPARE_CPUS 0.5               /* idle CPUs (seconds per second) that make time to spare */
#define LS_BACKLOG_AGE_NS 10000000000ll /* the oldest message waits no longer */

struct ls_backlog_msg {
    struct ls_backlog_msg *next;
    int64_t t;                        /* when it came */
    size_t size;
    _Alignas(8) uint8_t data[];
};

/* Store the oldest message. */
static void ls_backlog_take(recorder *r)
{
    ls_backlog *b = &r->backlog;
    struct ls_backlog_msg *m = b->head;
    b->head = m->next;
    if (!b->head)
        b->tail = NULL;
    b->bytes -= m->size;
    ls_take_msg(r, m->data, m->size);
    free(m);
    if (!b->head)
        malloc_trim(0);               /* the burst's memory back to the system */
}

void ls_backlog_add(recorder *r, const void *data, size_t size, bool ref)
{
    ls_backlog *b = &r->backlog;
    const struct ls_msg_hdr *h = data;
    const struct ls_batch_ref *br = NULL;
    if (ref) {
        if (!(br = ls_batch_ref(r, data, size)))
            return;
        size = sizeof(*h) + (br->len <= EVL_BATCH_BYTES ? br->len : 0);
    }
    while (b->head && b->bytes + size > b->limit)
        ls_backlog_take(r);           /* over the limit: store as it comes */
    struct ls_backlog_msg *m = malloc(sizeof(*m) + size);
    if (ref) {
        if (!ls_read_batch(r, h, br, m ? (struct ls_msg_hdr *)(void *)m->data : NULL)) {
            free(m);
            return;
        }
    } else if (m) {
        memcpy(m->data, data, size);
    } else {
        ls_take_msg(r, data, size);   /* no memory: now rather than never */
        return;
    }
    m->next = NULL;
    m->t = ls_now();
    m->size = size;
    if (b->tail)
        b->tail->next = m;
    else
        b->head = m;
    b->tail = m;
    b->bytes += size;
    b->msgs++;
    if (b->bytes > b->peak)
        b->peak = b->bytes;
}

void ls_backlog_drain(recorder *r, int64_t until)
{
    while (r->backlog.head && (!until || ls_now() < until))
        ls_backlog_take(r);
}

/* Idle CPU time per second since the last call, the recorder's own
 * counted as idle; -1 the first time or when /proc/stat is unreadable. */
static double ls_idle_cpus(ls_backlog *b, int64_t now)
{
    FILE *f = fopen("/proc/stat", "re");
    unsigned long long v[8] = { 0 };
    int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                       &v[3], &v[4], &v[5], &v[6], &v[7]) : 0;
    if (f)
        fclose(f);
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    int64_t self = ts.tv_sec * 1000000000ll + ts.tv_nsec;
    /* idle and iowait, in clock ticks */
    double idle = n == 8 ? (double)(v[3] + v[4]) / (double)sysconf(_SC_CLK_TCK) : -1;
    double spare = -1;
    if (idle >= 0 && b->idle_at >= 0 && b->seen_at && now > b->seen_at)
        spare = ((idle - b->idle_at) + (self - b->self_at) / 1e9) / ((now - b->seen_at) / 1e9);
    b->idle_at = idle;
    b->self_at = self;
    b->seen_at = now;
    return spare;
}

bool ls_backlog_tick(recorder *r, int64_t now, int64_t slice_ns)
{
    ls_backlog *b = &r->backlog;
    if (now - b->seen_at >= LS_SPARE_PERIOD_NS) {
        double spare = ls_idle_cpus(b, now);
        b->spare = spare >= LS_SPARE_CPUS && !b->hold;
    }
    if (!b->head)
        return false;
    if (!b->spare && now - b->head->t < LS_BACKLOG_AGE_NS)
        return false;
    ls_backlog_drain(r, now + slice_ns);
    return b->head != NULL;
}

void ls_backlog_free(recorder *r)
{
    while (r->backlog.head) {
        struct ls_backlog_msg *m = r->backlog.head;
        r->backlog.head = m->next;
        free(m);
    }
    r->backlog.tail = NULL;
    r->backlog.bytes = 0;
}
