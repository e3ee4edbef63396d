/*
 * flight_write.c -- a flight trace, written when a trigger's tail has
 * passed (or recording stops during it): a recorder of its own
 * (r->offline) with the same options and a store sink, fed the snapshot
 * records of the tasks alive at the window's start and then the messages
 * of the window from the ring, through the one decode path (ingest.c,
 * blocks.c), to its end (the sinks' end: derived tables, indexes).  Part
 * of the recorder (recorder.h).
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


/* ----------------------------------------------------------- writing one */

struct ls_feed {
    recorder *o;
    int64_t from, to;         /* the window */
    uint64_t fed;
};

static void feed_one(void *ctx, const struct ls_fent *e)
{
    struct ls_feed *fd = ctx;
    const struct ls_msg_hdr *h = (const void *)(e + 1);
    int64_t ts = (int64_t)h->ts;
    bool in;
    switch (h->type) {
    case LS_MSG_BATCH:
    case LS_MSG_REC:              /* records out of the window are left out by ingest */
        in = ts >= fd->from;
        break;
    case LS_MSG_BLOCK: {          /* ts: when it was taken; in if it overlaps */
        const struct ls_block *b = (const void *)(h + 1);
        if (h->len < sizeof(*b) || b->start_ns > INT64_MAX)
            return;
        int64_t start = (int64_t)b->start_ns;
        int64_t end = b->dur_ns < (uint64_t)(INT64_MAX - start) ? start + (int64_t)b->dur_ns
                                                                 : INT64_MAX;
        in = (end >= fd->from || ts >= fd->from) && start <= fd->to;
        break;
    }
    case LS_MSG_WINDOW: {
        const struct ls_window *w = (const void *)(h + 1);
        in = h->len >= sizeof(*w) && (int64_t)w->end_ns >= fd->from &&
             w->start_ns <= (uint64_t)fd->to;
        break;
    }
    case LS_MSG_FLIGHT_STATS:
        return;
    default:
        in = ts >= fd->from && ts <= fd->to;
        break;
    }
    if (!in)
        return;
    ls_ingest_msg(fd->o, h, e->size);
    fd->fed++;
}

uint64_t ls_flight_stat(recorder *parent, enum ls_stat k, int64_t from)
{
    struct ls_flight *f = parent->flight;
    uint64_t now = ls_stat(parent, k), base = 0;
    /* The last sample at or before the window's start (a sample is taken
     * every LS_STATS_EVERY_NS): a count over at least the window. */
    for (struct ls_fchunk *c = f ? f->first : NULL; c; c = c->next)
        for (size_t off = c->head; off < c->used;) {
            const struct ls_fent *e = (const void *)(c->data + off);
            const struct ls_msg_hdr *h = (const void *)(e + 1);
            off += sizeof(*e) + ((e->size + 7u) & ~7u);
            if (h->type != LS_MSG_FLIGHT_STATS)
                continue;
            if ((int64_t)h->ts > from)
                goto done;
            base = ((const uint64_t *)(const void *)(h + 1))[k];
        }
done:
    return now >= base ? now - base : 0;
}

/* The snapshot records of the tasks alive at the window's start, one
 * batch per loop known then (also loops without tasks: their rows). */
static void feed_preexisting(recorder *r, recorder *o, int64_t from)
{
    struct ls_flight *f = r->flight;
    for (size_t l = 0; l < r->nloops; l++) {
        struct ls_loop_info *li = &r->loops[l];
        if (li->stopped && li->stopped < from)
            continue;
        size_t n = 0;
        for (size_t i = 0; i < f->tcap; i++) {
            struct ls_ftask *t = &f->tasks[i];
            if (t->id && t->loop == li->id && t->created < from &&
                (!t->finished || t->finished >= from))
                n += t->len;
        }
        if (!n && li->seen > from)
            continue;                 /* not there yet: its own messages make its row */
        uint8_t *m = malloc(sizeof(struct ls_msg_hdr) + n);
        if (!m)
            continue;
        struct ls_msg_hdr *h = (void *)m;
        *h = (struct ls_msg_hdr){ .type = LS_MSG_BATCH, .len = (uint32_t)n, .ts = (uint64_t)from,
                                  .loop = li->id, .arg = li->pub, .pid = li->pid, .tid = li->tid };
        size_t off = sizeof(*h);
        for (size_t i = 0; i < f->tcap; i++) {
            struct ls_ftask *t = &f->tasks[i];
            if (!(t->id && t->loop == li->id && t->created < from &&
                  (!t->finished || t->finished >= from)))
                continue;
            struct evl_rec *e = (void *)(m + off);
            memcpy(e, t->rec, t->len);
            e->ts = (uint64_t)from;
            e->a32 |= EVL_REC_PREEXISTING;
            off += t->len;
            h->nrec++;
        }
        ls_ingest_msg(o, m, off);
        free(m);
    }
}

/* The next free name: STEM-N.EXT, never an existing file. */
static int next_path(struct ls_flight *f, char *path, size_t len)
{
    struct stat st;
    for (unsigned tries = 0; tries < 100000; tries++) {
        snprintf(path, len, "%s-%u%s", f->stem, ++f->next_index, f->ext);
        if (lstat(path, &st) != 0 && errno == ENOENT)
            return 0;
    }
    return -1;
}

/* Write the capture under way: [trigger - window, end of its tail] (or
 * what the ring still holds of it, and up to now if cut). */
void ls_flight_write(recorder *r, int64_t now, bool cut)
{
    struct ls_flight *f = r->flight;
    char path[PATH_MAX + 96], errbuf[512];
    int64_t from = f->trig_ns - r->flight_window_ns, to = cut && now < f->end_ns ? now : f->end_ns;
    if (from < r->attach_ns)
        from = r->attach_ns;
    if (from <= f->evicted_until)     /* the memory cap evicted the beginning */
        from = f->evicted_until + 1;
    f->pending = false;
    if (f->trig_named) {              /* its create has arrived by now */
        char who[96];
        ls_flight_task_label(r, f->trig_loop, f->trig_task, who, sizeof(who));
        snprintf(f->detail, sizeof(f->detail), "%s%s%s", f->pre, who, f->post);
    }
    recorder *o = calloc(1, sizeof(*o));
    if (!o || next_path(f, path, sizeof(path)) < 0) {
        free(o);
        f->failed++;
        ls_error("flight recorder: no free file name beside '%s'", r->out);
        return;
    }
    /* The same options; the attach state stays the recorder's. */
    o->pid = r->pid;
    o->out = path;
    o->no_batch = r->no_batch;
    o->mode = r->mode;
    o->wait_calls = r->wait_calls;
    o->wait_hook = r->wait_hook;
    o->quiet = true;
    o->ringbuf_kb = r->ringbuf_kb;
    o->block_threshold_ms = r->block_threshold_ms;
    o->no_blocking = r->no_blocking;
    o->syscalls = false;              /* per-thread totals since attach: not a window's */
    o->cmd = r->cmd;
    o->child = r->child;
    memcpy(o->binary, r->binary, sizeof(o->binary));
    memcpy(o->runtime, r->runtime, sizeof(o->runtime));
    o->dec = r->dec;
    o->py = r->py;
    o->offline = true;
    o->parent = r;
    o->pidfd = o->go_pipe = -1;
    o->attach_ns = o->start_ns = from;
    o->end_ns = o->detach_ns = o->rec_until = to;
    o->store = ls_store_create(path, false, errbuf, sizeof(errbuf));
    if (!o->store || ls_sink_add(o, &ls_store_sink, o->store) < 0) {
        f->failed++;
        ls_error("flight recorder: %s", errbuf);
        free(o);
        return;
    }
    ls_write_meta(o, r->argc, r->argv);
    ls_sink_meta(o, LS_META_TRIGGER, "%s", f->detail);
    ls_sink_meta(o, LS_META_TRIGGER_NS, "%lld", (long long)f->trig_ns);
    ls_sink_meta(o, LS_META_TRIGGER_DETECTED_NS, "%lld", (long long)f->detect_ns);
    ls_sink_meta(o, LS_META_FLIGHT_TRIGGERS, "%u", f->ntrig);
    ls_sink_meta(o, LS_META_FLIGHT_WINDOW_NS, "%lld", (long long)r->flight_window_ns);
    ls_sink_meta(o, LS_META_FLIGHT_TAIL_NS, "%lld", (long long)r->flight_tail_ns);
    ls_sink_meta(o, LS_META_FLIGHT_WINDOW_START_NS, "%lld", (long long)from);
    ls_sink_meta(o, LS_META_FLIGHT_WINDOW_END_NS, "%lld", (long long)to);
    ls_sink_meta(o, LS_META_FLIGHT_EVICTED_EARLY, "%llu",
                  (unsigned long long)f->evicted_early);
    ls_sink_meta(o, LS_META_FLIGHT_UNTRACKED_TASKS, "%llu",
                  (unsigned long long)f->untracked_tasks);
    int err = 0;
    if (!(o->rows = ls_tasks_new(LS_TASKS_MAX)))
        err = ls_error("flight recorder: out of memory");
    if (!err) {
        feed_preexisting(r, o, from);
        struct ls_feed fd = { .o = o, .from = from, .to = to };
        ls_flight_ring_each(f, feed_one, &fd);
        err = ls_output_finish(o, cut ? "flight recorder: recording stopped during the tail"
                                      : "flight recorder: trigger's tail ended");
    }
    if (err) {
        if (o->store)
            ls_store_finish(o->store, errbuf, sizeof(errbuf));
        f->failed++;
    } else {
        f->written++;
        if (!r->quiet)
            fprintf(stderr, "%swrote '%s': %s, %.1f s (%llu events, %llu tasks, %llu blocking "
                            "episodes)\n", isatty(2) ? "\r" : "", path, f->detail,
                    (to - from) / 1e9, (unsigned long long)o->records,
                    (unsigned long long)o->tasks_created, (unsigned long long)o->blocks);
    }
    ls_tasks_free(o->rows);
    ls_blocks_free(o);
    free(o->loops);
    free(o);
    (void)now;
}

