/*
 * evl_target.c -- libevl's side of the target, as the source stage
 * meets it (evl-probes.h, "batching"): each loop's published state
 * (struct evl_loop_pub, at an address its messages announce), read and
 * written with process_vm_readv/writev; the kept batches read out of the
 * target and released; the snapshot requests; telling a loop we read
 * kept batches and, when leaving, that we no longer do; what its loops
 * say they dropped.  Every address here is the target's word.  Part of
 * the recorder (recorder.h).
 */
#define _GNU_SOURCE
#include "recorder.h"

#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* The end of user space on x86-64: a target's address at or past it is
 * a lie. */
#define LS_USER_END (1ull << 47)

/* pub (and every address the recorder reads or writes in the target) is
 * the target's word: it must look like an aligned user address, and the
 * access goes through the kernel's checks on the target's own memory. */
static bool pub_plausible(uint64_t pub)
{
    return pub && pub % 8 == 0 && pub < LS_USER_END - sizeof(struct evl_loop_pub);
}

bool ls_read_pub(recorder *r, uint64_t pub, struct evl_loop_pub *cur)
{
    if (!pub_plausible(pub))
        return false;
    struct iovec local = { cur, sizeof(*cur) };
    struct iovec remote = { (void *)(uintptr_t)pub, sizeof(*cur) };
    return process_vm_readv(r->pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof(*cur);
}

/* Write n bytes at offset off of the loop's evl_loop_pub: false if pub
 * does not look like one or the write failed. */
bool ls_write_pub(recorder *r, uint64_t pub, size_t off, const void *src, size_t n)
{
    if (!pub_plausible(pub))
        return false;
    struct iovec local = { (void *)src, n };
    struct iovec remote = { (void *)(uintptr_t)(pub + off), n };
    return process_vm_writev(r->pid, &local, 1, &remote, 1, 0) == (ssize_t)n;
}

/* Leaving: the loops we told we read kept batches hand copies again (to
 * a tracer still attached), once we have read all they handed us. */
void ls_loops_leave(recorder *r)
{
    if (r->offline || r->target_gone)
        return;
    uint32_t zero = 0;
    for (size_t i = 0; i < r->nloops; i++)
        if (r->loops[i].reader)
            ls_write_pub(r, r->loops[i].pub, offsetof(struct evl_loop_pub, reader), &zero,
                         sizeof(zero));
}

/* Records the target's loops say they dropped while we held every buffer
 * they lend (evl_loop_pub.lost, since we first saw each). */
uint64_t ls_loop_lost(const recorder *r)
{
    uint64_t lost = 0;
    for (size_t i = 0; i < r->nloops; i++)
        lost += (uint32_t)(r->loops[i].lost - r->loops[i].lost0);
    return lost;
}

uint64_t ls_read_errors(recorder *r)
{
    return ls_stat(r, LS_STAT_READ_ERRORS) + r->ref_fail;
}

/* Ask a loop for its task snapshot again (evl-probes.h: snapshot_req).
 * Needed when the loop did not see our attach as a rise of the semaphore:
 * another tracer is attached, or the previous one left while the loop
 * slept.  A repeated snapshot is harmless (known tasks are skipped).
 * Returns the request written, 0 if none could be. */
static uint32_t request_snapshot(recorder *r, uint64_t pub)
{
    struct evl_loop_pub cur;
    if (!ls_read_pub(r, pub, &cur)) {
        r->snapshot_fail++;
        return 0;
    }
    uint32_t req = cur.snapshot_done + 1;
    if (!ls_write_pub(r, pub, offsetof(struct evl_loop_pub, snapshot_req), &req, sizeof(req))) {
        r->snapshot_fail++;
        return 0;
    }
    return req;                       /* 0 (a wrap) only means: do not wait for it */
}

/* Before detaching: a loop hands its records over at most every
 * EVL_TRACE_FLUSH_NS (evl-probes.h), so up to that much of the end would
 * be lost.  A snapshot request makes each loop hand its buffer over at its
 * next iteration (a waiting loop with records wakes within that time);
 * wait for it, a few flush periods at most (a loop with nothing buffered
 * may sleep on: it has nothing to lose). */
void ls_flush_loops(recorder *r)
{
    if (r->target_gone || r->offline)
        return;
    size_t asked = 0;
    for (size_t i = 0; i < r->nloops; i++) {
        struct ls_loop_info *li = &r->loops[i];
        li->flush_req = li->stopped ? 0 : request_snapshot(r, li->pub);
        asked += li->flush_req != 0;
    }
    int64_t deadline = ls_now() + 5 * (int64_t)EVL_TRACE_FLUSH_NS;
    while (asked && ls_now() < deadline) {
        usleep(1000);
        asked = 0;
        for (size_t i = 0; i < r->nloops; i++) {
            struct ls_loop_info *li = &r->loops[i];
            struct evl_loop_pub cur;
            if (li->flush_req && ls_read_pub(r, li->pub, &cur) && cur.snapshot_done != li->flush_req)
                asked++;
        }
    }
    for (size_t i = 0; i < r->nloops; i++) {
        struct evl_loop_pub cur;
        if (r->loops[i].pub && ls_read_pub(r, r->loops[i].pub, &cur))
            r->loops[i].lost = cur.lost;
    }
}

/* A batch the loop keeps until we have read it (LS_MSG_BATCH_REF): its
 * reference, or NULL when malformed (counted). */
const struct ls_batch_ref *ls_batch_ref(recorder *r, const void *data, size_t size)
{
    const struct ls_msg_hdr *h = data;
    if (size < sizeof(*h) + sizeof(struct ls_batch_ref) || h->len < sizeof(struct ls_batch_ref)) {
        r->rejected_msgs++;
        return NULL;
    }
    return (const struct ls_batch_ref *)(const void *)(h + 1);
}

/* Read the kept batch b (of the message h) from the target into m, with
 * room for a header and b->len bytes, as the LS_MSG_BATCH the copying
 * probe would have sent; then free it and every batch before it in the
 * loop (evl_loop_pub.released).  An empty one still announces the loop
 * (its first batch, or the loop lost records for want of a free buffer).
 * False when unreadable (the target exited, or lied about where the batch
 * was or how long it is) or m is NULL (no memory for it); counted in
 * ref_fail. */
bool ls_read_batch(recorder *r, const struct ls_msg_hdr *h, const struct ls_batch_ref *b,
                   struct ls_msg_hdr *m)
{
    atomic_store_explicit(&r->prio.kept, true, memory_order_relaxed);   /* prio.c */
    r->refs++;
    bool ok = m && b->len <= EVL_BATCH_BYTES && b->addr < LS_USER_END;
    if (ok) {
        *m = *h;
        m->type = LS_MSG_BATCH;
        m->len = b->len;
        m->pad = 1;                   /* from a loop that keeps batches (ls_loop_contact) */
    }
    if (ok && b->len) {
        struct iovec local = { m + 1, b->len };
        struct iovec remote = { (void *)(uintptr_t)b->addr, b->len };
        ok = process_vm_readv(r->pid, &local, 1, &remote, 1, 0) == (ssize_t)b->len;
    }
    if (!ok)
        r->ref_fail++;
    /* Released even when unreadable: the loop must not wait for it.  A
     * failed write only keeps the loop's buffers held (it counts what it
     * drops).  reader is ls_loop_contact's, which this batch reaches
     * marked as from a loop that keeps batches. */
    uint32_t seq = b->seq;
    ls_write_pub(r, h->arg, offsetof(struct evl_loop_pub, released), &seq, sizeof(seq));
    return ok;
}

/* A loop_start: it starts under our eyes (no tasks yet, no snapshot
 * needed); a libevl whose evl_loop_pub holds `reader` can keep its
 * batches for us from its first one, so that evl_run's return waits for
 * us to read them. */
void ls_loop_started(recorder *r, struct ls_loop_info *li, const struct ls_msg_hdr *h)
{
    li->snapshot_asked = true;
    ls_loop_contact(r, li, h->arg,
                    h->pad >= offsetof(struct evl_loop_pub, reader) + sizeof(uint32_t));
}

/* A batch (copied, or kept and read: ls_read_batch marks it keepable).
 * An empty kept batch is what a loop sends when it dropped records for
 * want of a free buffer: its count is read then, while the target lives
 * (ls_flush_loops reads it once more at the end). */
void ls_loop_batch(recorder *r, struct ls_loop_info *li, const struct ls_msg_hdr *h)
{
    bool keepable = h->type == LS_MSG_BATCH && h->pad == 1;
    ls_loop_contact(r, li, h->arg, keepable);
    struct evl_loop_pub cur;
    if (keepable && !h->len && !r->offline && ls_read_pub(r, li->pub, &cur))
        li->lost = cur.lost;
}

void ls_loop_contact(recorder *r, struct ls_loop_info *li, uint64_t pub, bool keepable)
{
    if (li->pub != pub && !r->offline) {  /* first seen (or moved): what it lost before us */
        struct evl_loop_pub cur;
        li->lost0 = li->lost = ls_read_pub(r, pub, &cur) ? cur.lost : 0;
        li->reader = false;
    }
    li->pub = pub;
    /* A loop that can keep its batches for us to read is told we do (once;
     * without the right to write its memory it goes on handing copies). */
    if (keepable && !li->reader && !r->offline && !r->no_batch) {
        uint32_t one = 1;
        ls_write_pub(r, pub, offsetof(struct evl_loop_pub, reader), &one, sizeof(one));
        li->reader = true;            /* asked: not again */
    }
    if (!li->snapshot_asked) {
        li->snapshot_asked = true;
        if (!r->offline)
            request_snapshot(r, pub);
    }
}

