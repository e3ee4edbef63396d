/*
 * flight.c -- the flight recorder's capture (`record --flight-recorder
 * WINDOW`): every message of the ring buffer is copied, with its arrival
 * time, into an in-memory FIFO of 1 MiB chunks, kept while it is younger
 * than the window (plus LS_FLIGHT_SLACK_NS, plus what a trace being
 * captured still needs) and while the memory cap allows; a map of the
 * live tasks keeps each one's task_create record.  A trigger (a long
 * blocking episode, a leak verdict, SIGUSR1) opens a capture; when its
 * tail has passed, flight_write.c writes it.  Rules and bounds:
 * tracer/README.md, "Flight recorder".  Part of the recorder
 * (recorder.h).
 */
#define _GNU_SOURCE
#include "flight_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>


static size_t flight_bytes(const struct ls_flight *f)
{
    return sizeof(*f) + f->nchunks * LS_CHUNK_BYTES + f->tcap * sizeof(struct ls_ftask);
}

/* The task map: open addressing, linear probing, at most half full
 * (deleted slots count), its bytes at most an eighth of --flight-memory so
 * that a rehash (old and new table at once) stays within a quarter. */
static size_t thash(uint64_t loop, uint64_t id, size_t cap)
{
    uint64_t h = (loop * 0x9E3779B97F4A7C15ull) ^ id;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    return (size_t)h & (cap - 1);
}

struct ls_ftask *ls_flight_task(struct ls_flight *f, uint64_t loop, uint64_t id)
{
    if (!f->tcap)
        return NULL;
    for (size_t i = thash(loop, id, f->tcap);; i = (i + 1) & (f->tcap - 1)) {
        struct ls_ftask *t = &f->tasks[i];
        if (!t->id && !t->loop)
            return NULL;
        if (t->id == id && t->loop == loop)
            return t;
    }
}

static int trehash(recorder *r, size_t cap)
{
    struct ls_flight *f = r->flight;
    struct ls_ftask *n = calloc(cap, sizeof(*n));
    if (!n)
        return -1;
    for (size_t i = 0; i < f->tcap; i++) {
        struct ls_ftask *t = &f->tasks[i];
        if (!t->id)
            continue;
        size_t j = thash(t->loop, t->id, cap);
        while (n[j].id)
            j = (j + 1) & (cap - 1);
        n[j] = *t;
    }
    free(f->tasks);
    f->tasks = n;
    f->tcap = cap;
    f->ndeleted = 0;
    return 0;
}

/* The slot for a new task, NULL when the map is at its cap. */
static struct ls_ftask *tadd(recorder *r, uint64_t loop, uint64_t id)
{
    struct ls_flight *f = r->flight;
    if (2 * (f->ntasks + f->ndeleted + 1) > f->tcap) {
        size_t cap = f->tcap;
        if (2 * (f->ntasks + 1) > cap)
            cap *= 2;                 /* else: the same size, without the deleted */
        if (2 * cap * sizeof(struct ls_ftask) > r->flight_memory / 4 || trehash(r, cap) < 0)
            return NULL;
    }
    size_t i = thash(loop, id, f->tcap);
    while (f->tasks[i].id)
        i = (i + 1) & (f->tcap - 1);
    if (f->tasks[i].loop)
        f->ndeleted--;                /* a deleted slot reused */
    f->ntasks++;
    f->tasks[i] = (struct ls_ftask){ .loop = loop, .id = id };
    return &f->tasks[i];
}

static void tdel(struct ls_flight *f, struct ls_ftask *t)
{
    *t = (struct ls_ftask){ .loop = 1 };
    f->ntasks--;
    f->ndeleted++;
}

/* --------------------------------------------------------------- the ring */

static void ring_pop(struct ls_flight *f)
{
    struct ls_fchunk *c = f->first;
    const struct ls_fent *e = (const void *)(c->data + c->head);
    if (e->arrival > f->evicted_until)
        f->evicted_until = e->arrival;
    c->head += sizeof(*e) + ((e->size + 7u) & ~7u);
    f->nmsgs--;
    if (c->head < c->used)
        return;
    if (c == f->last) {
        c->head = c->used = 0;        /* empty: reused from its start */
    } else {
        f->first = c->next;
        munmap(c, LS_CHUNK_BYTES);
        f->nchunks--;
    }
}

/* The oldest message a capture may still need arrived at or after this:
 * the window plus the slack before now, and before a pending trigger. */
static int64_t ring_horizon(recorder *r, int64_t now)
{
    struct ls_flight *f = r->flight;
    int64_t h = now - r->flight_window_ns - LS_FLIGHT_SLACK_NS;
    if (f->pending && f->trig_ns - r->flight_window_ns - LS_FLIGHT_SLACK_NS < h)
        h = f->trig_ns - r->flight_window_ns - LS_FLIGHT_SLACK_NS;
    return h;
}

static bool ring_oldest(const struct ls_flight *f, int64_t *arrival)
{
    const struct ls_fchunk *c = f->first;
    if (!c || c->head == c->used)
        return false;
    *arrival = ((const struct ls_fent *)(const void *)(c->data + c->head))->arrival;
    return true;
}

static void ring_evict(recorder *r, int64_t now)
{
    struct ls_flight *f = r->flight;
    int64_t horizon = ring_horizon(r, now), a;
    size_t budget = r->flight_memory - r->flight_memory / 4;
    while (ring_oldest(f, &a)) {
        bool full = f->nchunks * LS_CHUNK_BYTES > budget;
        if (!full && a >= horizon)
            break;
        if (a >= horizon)
            f->evicted_early++;       /* the cap, not the age: a shorter window */
        ring_pop(f);
    }
}

static void ring_push(recorder *r, const void *data, size_t size, int64_t now)
{
    struct ls_flight *f = r->flight;
    size_t need = sizeof(struct ls_fent) + ((size + 7) & ~(size_t)7);
    if (need > LS_CHUNK_DATA) {       /* larger than any message BPF sends */
        f->too_big++;
        return;
    }
    struct ls_fchunk *c = f->last;
    if (!c || LS_CHUNK_DATA - c->used < need) {
        c = mmap(NULL, LS_CHUNK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (c == MAP_FAILED) {
            f->too_big++;
            return;
        }
        c->next = NULL;
        c->head = c->used = 0;
        if (f->last)
            f->last->next = c;
        else
            f->first = c;
        f->last = c;
        f->nchunks++;
    }
    struct ls_fent *e = (void *)(c->data + c->used);
    *e = (struct ls_fent){ .arrival = now, .size = (uint32_t)size };
    memcpy(e + 1, data, size);
    c->used += need;
    f->nmsgs++;
    ring_evict(r, now);
}

/* Call fn on each message in the ring, oldest first. */
void ls_flight_ring_each(struct ls_flight *f, void (*fn)(void *ctx, const struct ls_fent *e),
                         void *ctx)
{
    for (struct ls_fchunk *c = f->first; c; c = c->next)
        for (size_t off = c->head; off < c->used;) {
            const struct ls_fent *e = (const void *)(c->data + off);
            fn(ctx, e);
            off += sizeof(*e) + ((e->size + 7u) & ~7u);
        }
}

/* ------------------------------------------------------------ the triggers */


/* A trigger fired at trig (the episode's start, the verdict's time, the
 * signal), seen now.  One capture at a time: a trigger during a capture's
 * tail is in its file (counted) and extends nothing. */
static void flight_trigger(recorder *r, int64_t trig, int64_t now, const char *pre,
                              bool named, uint64_t loop, uint64_t task, const char *post)
{
    struct ls_flight *f = r->flight;
    f->triggers++;
    if (f->pending) {
        f->ntrig++;
        return;
    }
    if (trig > now || trig < r->attach_ns)
        trig = trig > now ? now : r->attach_ns;
    f->pending = true;
    f->trig_ns = trig;
    f->detect_ns = now;
    f->end_ns = now + r->flight_tail_ns;
    f->ntrig = 1;
    snprintf(f->pre, sizeof(f->pre), "%s", pre);
    snprintf(f->post, sizeof(f->post), "%s", post ? post : "");
    f->trig_named = named;
    f->trig_loop = loop;
    f->trig_task = task;
    char who[96] = "";
    if (named)
        ls_flight_task_label(r, loop, task, who, sizeof(who));
    snprintf(f->detail, sizeof(f->detail), "%s%s%s", f->pre, who, f->post);
    if (!r->quiet)
        fprintf(stderr, "%strigger: %s; writing the trace in %.1f s\n", isatty(2) ? "\r" : "",
                f->detail, (f->end_ns - now) / 1e9 + LS_FLIGHT_GRACE_NS / 1e9);
}

/* A task's name for a trigger line: printable ASCII, the rest '?'. */
void ls_flight_task_label(recorder *r, uint64_t loop, uint64_t task, char *buf, size_t len)
{
    struct ls_ftask *t = ls_flight_task(r->flight, loop, task);
    if (!task) {
        snprintf(buf, len, "a callback");
        return;
    }
    char name[48] = "";
    if (t && t->len > sizeof(struct evl_rec)) {
        const struct evl_rec *e = (const void *)t->rec;
        size_t n = e->a32 & ~EVL_REC_PREEXISTING, i;
        if (n > t->len - sizeof(*e))
            n = t->len - sizeof(*e);
        for (i = 0; i < n && i < sizeof(name) - 1; i++) {
            uint8_t c = t->rec[sizeof(*e) + i];
            name[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
        }
        name[i] = 0;
    }
    snprintf(buf, len, "task %llu%s%s%s", (unsigned long long)task, name[0] ? " (" : "", name,
             name[0] ? ")" : "");
}

static void fmt_ms(char *buf, size_t len, int64_t ns)
{
    snprintf(buf, len, "%.*f ms", ns < 10000000 ? 2 : 1, ns / 1e6);
}

/* A blocking episode in the ring: a trigger if long enough.  Off-CPU
 * episodes (and generic on-CPU ones, sent at the step's end) carry their
 * duration; a libevl on-CPU episode is sent at a sample, mid-step: it
 * counts by its wall time so far, then is watched (watch_oncpu). */
static void flight_block(recorder *r, const struct ls_msg_hdr *h, int64_t now)
{
    const struct ls_block *b = (const void *)(h + 1);
    size_t fixed = sizeof(*b) + sizeof(struct ls_pystack);
    if (h->len < fixed || b->stack_len > h->len - fixed ||
        (b->kind != LS_BLOCK_OFFCPU && b->kind != LS_BLOCK_ONCPU) || b->start_ns > INT64_MAX)
        return;
    struct ls_loop_info *li = ls_loop_seen(r, h->loop, h->pid, h->tid, (int64_t)h->ts);
    if (!li || !r->trig_block_ns)
        return;
    int64_t start = (int64_t)b->start_ns, dur = (int64_t)b->dur_ns;
    bool watch = b->kind == LS_BLOCK_ONCPU && r->dec->tasks;
    if (watch)
        dur = (int64_t)h->ts >= start ? (int64_t)h->ts - start : 0;
    char pre[128], d[32], x[32];
    fmt_ms(x, sizeof(x), r->trig_block_ns);
    if (dur >= r->trig_block_ns) {
        fmt_ms(d, sizeof(d), dur);
        snprintf(pre, sizeof(pre), "blocking>=%s: %s %s in ", x, d,
                 b->kind == LS_BLOCK_OFFCPU ? "off-CPU" : watch ? "on-CPU (so far)" : "on-CPU");
        if (!r->dec->tasks) {         /* no task to name: its thread */
            char who[32];
            snprintf(who, sizeof(who), "loop thread %u", h->tid);
            flight_trigger(r, start, now, pre, false, 0, 0, who);
        } else {
            flight_trigger(r, start, now, pre, true, h->loop, b->task, "");
        }
    } else if (watch) {
        li->oncpu_start = start;
        li->oncpu_steps = b->steps;
        li->oncpu_task = b->task;
    }
}

/* libevl on-CPU episodes shorter than the trigger when sampled: while the
 * loop's published step is still the sampled one, the step runs on; it
 * fires once it has run the trigger's time (checked every 20 ms). */
static void watch_oncpu(recorder *r, int64_t now)
{
    for (size_t i = 0; i < r->nloops; i++) {
        struct ls_loop_info *li = &r->loops[i];
        if (!li->oncpu_start || now - li->oncpu_start < r->trig_block_ns)
            continue;
        struct evl_loop_pub cur;
        int64_t start = li->oncpu_start;
        li->oncpu_start = 0;
        if (!ls_read_pub(r, li->pub, &cur) || cur.steps != li->oncpu_steps)
            continue;                 /* the step has ended (or cannot be told) */
        char pre[128], d[32], x[32];
        fmt_ms(x, sizeof(x), r->trig_block_ns);
        fmt_ms(d, sizeof(d), now - start);
        snprintf(pre, sizeof(pre), "blocking>=%s: %s on-CPU (still running) in ", x, d);
        flight_trigger(r, start, now, pre, true, li->id, li->oncpu_task, "");
    }
}

/* A batch: the task map (creates, finishes) and leak verdicts.  The
 * records are the target's: framing and ids are checked here, the rest by
 * ingest.c when a trace is written. */
static void flight_batch(recorder *r, struct ls_loop_info *li, const struct ls_msg_hdr *h,
                            int64_t now)
{
    struct ls_flight *f = r->flight;
    const uint8_t *p = (const uint8_t *)(h + 1);
    ls_loop_batch(r, li, h);
    for (size_t off = 0; off + sizeof(struct evl_rec) <= h->len;) {
        const struct evl_rec *e = (const struct evl_rec *)(const void *)(p + off);
        if (e->size < sizeof(*e) || e->size % 8 || e->size > h->len - off)
            break;
        off += e->size;
        if (!e->task || e->ts > h->ts || e->ts > INT64_MAX)
            continue;
        struct ls_ftask *t;
        switch (e->kind) {
        case EVL_PROBE_ID_task_create:
            t = ls_flight_task(f, li->id, e->task);
            if (t && (e->a32 & EVL_REC_PREEXISTING))
                break;                /* a repeated snapshot: we know it */
            if (!t && !(t = tadd(r, li->id, e->task))) {
                f->untracked_tasks++;
                break;
            }
            t->created = (int64_t)e->ts;
            t->finished = 0;
            t->len = e->size < LS_FREC_MAX ? e->size : (uint32_t)LS_FREC_MAX;
            memcpy(t->rec, e, t->len);
            ((struct evl_rec *)(void *)t->rec)->size = (uint16_t)t->len;
            break;
        case EVL_PROBE_ID_task_finish:
            if ((t = ls_flight_task(f, li->id, e->task)) && !t->finished)
                t->finished = (int64_t)e->ts ? (int64_t)e->ts : 1;
            break;
        case EVL_PROBE_ID_task_leak:
            if (r->trig_leak && e->ts >= (uint64_t)r->attach_ns) {
                static const char *const kinds[] = {
#define LS_LK(n, v, s) [v] = s,
                    EVL_LEAK_LIST(LS_LK)
#undef LS_LK
                };
                const char *k = e->a32 < sizeof(kinds) / sizeof(kinds[0]) && kinds[e->a32]
                                ? kinds[e->a32] : "?";
                char post[64];
                snprintf(post, sizeof(post), " %s", k);
                flight_trigger(r, (int64_t)e->ts, now, "leak: ", true, li->id, e->task, post);
            }
            break;
        }
    }
}

static void on_msg(recorder *r, const void *data, size_t size)
{
    const struct ls_msg_hdr *h = data;
    int64_t now = ls_now();
    if (size < sizeof(*h) || h->len > size - sizeof(*h))
        return;
    ring_push(r, data, sizeof(*h) + h->len, now);   /* not a batch's unused room */
    if (h->type == LS_MSG_BLOCK) {
        flight_block(r, h, now);
        return;
    }
    if (h->type == LS_MSG_PYTASK || h->type == LS_MSG_PROC)
        return;                       /* not a loop's (ingest.c) */
    /* The loop's entry: its sampler, its snapshot (as when recording). */
    struct ls_loop_info *li = ls_loop_seen(r, h->loop, h->pid, h->tid, (int64_t)h->ts);
    if (!li) {
        r->rejected_msgs++;
        return;
    }
    switch (h->type) {
    case LS_MSG_LOOP_START:
        ls_loop_started(r, li, h);
        break;
    case LS_MSG_LOOP_STOP:
        li->stopped = (int64_t)h->ts;
        li->oncpu_start = 0;
        /* Its tasks are over: they leave the map with the window. */
        for (size_t i = 0; i < r->flight->tcap; i++) {
            struct ls_ftask *t = &r->flight->tasks[i];
            if (t->id && t->loop == h->loop && !t->finished)
                t->finished = (int64_t)h->ts;
        }
        break;
    case LS_MSG_BATCH:
    case LS_MSG_REC:
        if (r->dec->tasks)
            flight_batch(r, li, h, now);
        break;
    }
}

/* ------------------------------------------------------------- lifecycle */

static const ls_hold_ops flight_hold;

int ls_flight_open(recorder *r)
{
    struct ls_flight *f = calloc(1, sizeof(*f));
    if (!f)
        return ls_error("out of memory");
    r->flight = f;
    r->hold = &flight_hold;
    /* trace.db -> trace-1.db, trace-2.db ...; a name without an extension
     * gets -N at its end. */
    const char *slash = strrchr(r->out, '/'), *dot = strrchr(r->out, '.');
    if (!dot || (slash && dot < slash) || dot == (slash ? slash + 1 : r->out) ||
        strlen(dot) >= sizeof(f->ext))
        dot = r->out + strlen(r->out);
    if ((size_t)(dot - r->out) >= sizeof(f->stem) - 16)
        return ls_error("output name too long: '%s'", r->out);
    snprintf(f->stem, sizeof(f->stem), "%.*s", (int)(dot - r->out), r->out);
    snprintf(f->ext, sizeof(f->ext), "%s", dot);
    /* The files are made later: their directory must take them. */
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - r->out) + 1 : 1,
             slash ? r->out : ".");
    if (access(dir, W_OK | X_OK) != 0)
        return ls_error("cannot write flight traces into '%s': %s", dir, strerror(errno));
    f->tcap = 1024;
    f->tasks = calloc(f->tcap, sizeof(*f->tasks));
    if (!f->tasks)
        return ls_error("out of memory");
    return 0;
}

static void push_stats(recorder *r, int64_t now)
{
    struct {
        struct ls_msg_hdr h;
        uint64_t v[LS_STAT_COUNT];
    } m = { .h = { .type = LS_MSG_FLIGHT_STATS, .len = sizeof(m.v), .ts = (uint64_t)now } };
    for (int k = 0; k < LS_STAT_COUNT; k++)
        m.v[k] = ls_stat(r, (enum ls_stat)k);
    ring_push(r, &m, sizeof(m), now);
}

static bool tick(recorder *r, int64_t now, int64_t slice_ns, bool usr1)
{
    struct ls_flight *f = r->flight;
    (void)slice_ns;
    if (usr1)
        flight_trigger(r, now, now, "SIGUSR1", false, 0, 0, "");
    if (r->trig_block_ns && r->dec->tasks)
        watch_oncpu(r, now);
    if (!f->last_stats || now - f->last_stats >= LS_STATS_EVERY_NS) {
        f->last_stats = now;
        push_stats(r, now);        /* also evicts by age */
    }
    if (now - f->last_sweep >= LS_SWEEP_EVERY_NS) {
        /* Tasks finished before everything the ring still holds can be
         * alive at no window's start any more. */
        f->last_sweep = now;
        for (size_t i = 0; i < f->tcap; i++) {
            struct ls_ftask *t = &f->tasks[i];
            if (t->id && t->finished && t->finished <= f->evicted_until)
                tdel(f, t);
        }
    }
    if (f->pending && now >= f->end_ns + LS_FLIGHT_GRACE_NS)
        ls_flight_write(r, now, false);
    return false;
}

static void flight_close(recorder *r, const char *why)
{
    struct ls_flight *f = r->flight;
    int64_t now = ls_now();
    if (f->pending)
        ls_flight_write(r, now, true);
    if (!r->quiet || f->failed)
        fprintf(stderr, "flight recorder: %u trace%s written for %llu trigger%s from pid %d in "
                        "%.1f s (%s)%s\n", f->written, f->written == 1 ? "" : "s",
                (unsigned long long)f->triggers, f->triggers == 1 ? "" : "s", r->pid,
                (now - r->start_ns) / 1e9, why, f->failed ? "; some could not be written" : "");
}

const char *ls_flight_stem(recorder *r) { return r->flight->stem; }
const char *ls_flight_ext(recorder *r) { return r->flight->ext; }

void ls_flight_status(recorder *r, char *buf, size_t len)
{
    struct ls_flight *f = r->flight;
    int64_t a = 0;
    double span = ring_oldest(f, &a) ? (ls_now() - a) / 1e9 : 0;
    snprintf(buf, len, "flight recorder pid %d: %.1f MiB for %.1f s, %u written%s", r->pid,
             flight_bytes(f) / 1048576.0, span, f->written, f->pending ? ", capturing" : "");
}

static void flight_free(recorder *r)
{
    struct ls_flight *f = r->flight;
    if (!f)
        return;
    while (f->first) {
        struct ls_fchunk *c = f->first;
        f->first = c->next;
        munmap(c, LS_CHUNK_BYTES);
    }
    free(f->tasks);
    free(f);
    r->flight = NULL;
}


/* Every message goes into the ring (a kept batch read out of the target
 * first); a trace is written per trigger, never from here. */
static bool take(recorder *r, const void *data, size_t size, bool ref)
{
    if (ref && !(data = ls_read_ref(r, data, &size)))
        return true;
    on_msg(r, data, size);
    if (r->flight_live)               /* the agent's: its metrics too */
        ls_take_msg(r, data, size);
    return true;
}

static const ls_hold_ops flight_hold = {
    .name = "flight recorder",
    .take = take,
    .tick = tick,
    .close = flight_close,
    .free = flight_free,
};
