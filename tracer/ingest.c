/*
 * ingest.c -- the pipeline's wiring and the common dispatch.  ls_on_msg
 * is the source's callback for each message libbpf takes from the ring
 * buffer: the hold stage (hold.h: the backlog or the flight recorder)
 * may take it, else it goes on at once, a kept batch read out of the
 * target first (evl_target.c); ls_take_msg passes a message whose time
 * has come to the decoders; ls_ingest_msg is their common part: each
 * loop's entry (the loop table), a loop's end, blocking episodes
 * (blocks.c), and the rest to the mode's decoder (decode.h).  Part of the recorder (recorder.h).
 */
#define _GNU_SOURCE
#include "recorder.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The loop's entry, made (with its loops row and CPU sampler) the first
 * time a message names it. */
struct ls_loop_info *ls_loop_seen(recorder *r, uint64_t loop, uint32_t pid, uint32_t tid,
                                  int64_t ts)
{
    for (size_t i = 0; i < r->nloops; i++)
        if (r->loops[i].id == loop)
            return &r->loops[i];
    if (r->nloops == LS_MAX_LOOPS)     /* loop ids are the target's choice */
        return NULL;
    if (r->nloops == r->loops_cap) {
        size_t cap = r->loops_cap ? 2 * r->loops_cap : 8;
        struct ls_loop_info *a = realloc(r->loops, cap * sizeof(*a));
        if (!a)
            return NULL;
        r->loops = a;
        r->loops_cap = cap;
    }
    struct ls_loop_info *li = &r->loops[r->nloops];
    if (!r->offline) {                /* a flight trace never touches the target */
        ls_start_samplers(r);
        if (r->dec->loop_new)
            r->dec->loop_new(r);      /* before its row */
    }
    ls_sink_loop(r, loop, pid, tid, ts);
    *li = (struct ls_loop_info){ .id = loop, .last_ts = r->attach_ns, .pid = pid, .tid = tid,
                                 .seen = ts };
    r->nloops++;
    return li;
}

/* Symbols need the process's mappings as they are once it runs (for a
 * child started by us, libraries are mapped only after exec): made at the
 * first use. */
ls_syms *ls_get_syms(recorder *r)
{
    if (r->parent)                    /* a flight trace: the recorder's symbols */
        return r->syms = ls_get_syms(r->parent);
    if (!r->syms)
        r->syms = ls_syms_new(r->pid);
    return r->syms;
}

/* Drain the ring buffer for at most `budget_ns`, so that a producer
 * faster than SQLite cannot keep the recorder from stopping or committing.
 * Returns messages consumed, or -1 when the budget ran out first; 0 at
 * once when called while a message is decoded (a census asked for by a
 * blocking episode: decode_asyncio.c). */
int ls_consume(recorder *r, int64_t budget_ns)
{
    if (r->consuming || !r->rb)
        return 0;                     /* from a message's decoding: libbpf's ring is not
                                       * re-entrant */
    r->consuming = true;
    r->consume_until = ls_now() + budget_ns;
    int n = ring_buffer__consume(r->rb);
    r->consuming = false;
    return n == -EAGAIN ? -1 : n;
}

#define LS_CHECK_BYTES 32768

/* A message whose time has come: decoded, or past --max-size only
 * counted. */
void ls_take_msg(recorder *r, const void *data, size_t size)
{
    if (r->capped_ns)
        r->after_cap++;               /* past --max-size: read, released, not stored */
    else
        ls_ingest_msg(r, data, size);
}

/* A kept batch (LS_MSG_BATCH_REF) read out of the target into r->ref_buf,
 * as the LS_MSG_BATCH the copying probe would have sent: that message and
 * *size, or NULL (malformed, unreadable, no memory: counted). */
const void *ls_read_ref(recorder *r, const void *data, size_t *size)
{
    const struct ls_msg_hdr *h = data;
    const struct ls_batch_ref *b;
    if (!r->ref_buf)
        r->ref_buf = malloc(sizeof(*h) + EVL_BATCH_BYTES);
    struct ls_msg_hdr *m = (struct ls_msg_hdr *)(void *)r->ref_buf;
    if (!(b = ls_batch_ref(r, data, *size)) || !ls_read_batch(r, h, b, m))
        return NULL;
    *size = sizeof(*h) + b->len;
    return m;
}

/* The source's callback: each message libbpf takes from the ring, once.
 * The hold stage may take it (r->hold); else it goes on now. */
int ls_on_msg(void *ctx, void *data, size_t size)
{
    recorder *r = ctx;
    const struct ls_msg_hdr *h = data;
    int type = size >= sizeof(*h) ? (int)h->type : -1;
    bool ref = type == LS_MSG_BATCH_REF;
    if (ref || type == LS_MSG_BATCH)
        r->batches_in++;
    /* A loop first heard from through a kept batch that the backlog will
     * keep: what first contact asks of it (its snapshot: tracer/README.md,
     * "Every attach gets the snapshot") is asked now, not when the batch is
     * stored, up to LS_BACKLOG_AGE_NS later on a busy machine: a recorder
     * attached beside another would record for that long without the
     * names of the tasks already pending. */
    if (ref && r->backlog && h->len >= sizeof(struct ls_batch_ref)) {
        struct ls_loop_info *li = ls_loop_seen(r, h->loop, h->pid, h->tid, (int64_t)h->ts);
        if (li && !li->snapshot_asked)
            ls_loop_contact(r, li, h->arg, true);
    }
    if (!r->hold || !r->hold->take(r, data, size, ref)) {
        size_t n = size;
        const void *m = ref ? ls_read_ref(r, data, &n) : data;
        if (m)
            ls_take_msg(r, m, n);
    }
    /* libbpf has already consumed this message when it calls us (a
     * negative return does not give it back): the budget is checked only
     * once it is handled, and the rest stays queued.  Checked every
     * LS_CHECK_BYTES: after each batch, after a thousand small messages;
     * so is --max-size, so that what one drain stores past the cap is
     * bounded in bytes, not in time. */
    if ((r->since_check += ref ? EVL_BATCH_BYTES : size) >= LS_CHECK_BYTES) {
        r->since_check = 0;
        if (r->max_size && !r->capped_ns && ls_max_size_reached(r))
            return -EAGAIN;           /* the main loop stops the recording */
        if (ls_now() > r->consume_until)
            return -EAGAIN;
    }
    return 0;
}

void ls_ingest_msg(recorder *r, const void *data, size_t size)
{
    const struct ls_msg_hdr *h = data;
    if (size < sizeof(*h) || h->len > size - sizeof(*h))
        return;
    if (h->type == LS_MSG_BLOCK) {
        ls_on_block(r, h);
        return;
    }
    if (h->type == LS_MSG_PROC) {     /* a group member's fork or exec (group.c) */
        if (r->member)
            ls_group_proc(r, (uint32_t)h->loop, (uint32_t)h->arg);
        return;
    }
    if (h->type == LS_MSG_PYTASK) {   /* not a loop's: decode_asyncio.c */
        if (h->len >= sizeof(struct ls_pytask_ev))
            ls_asyncio_msg(r, h->ts, (const struct ls_pytask_ev *)(const void *)(h + 1));
        return;
    }
    struct ls_loop_info *li = ls_loop_seen(r, h->loop, h->pid, h->tid, (int64_t)h->ts);
    if (!li) {
        r->rejected_msgs++;           /* more loop ids than any real program */
        return;
    }
    if (h->type == LS_MSG_LOOP_STOP) {
        li->stopped = (int64_t)h->ts;
        ls_sink_loop_stop(r, h->loop, (int64_t)h->ts);
    }
    r->dec->msg(r, li, h);
}
