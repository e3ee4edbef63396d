/*
 * ingest.c -- what arrives through the ring buffer (record.h's messages):
 * the dispatch, each loop's entry, the lifecycle records of batches
 * (checked at the trust boundary ls_rec_valid, then stored; fed to the
 * one replay of task states, model/replay.h, only while `top` watches),
 * the snapshot request, and the generic mode's windows.  Blocking
 * episodes go to blocks.c.  Part of the recorder (recorder.h).
 */
#define _GNU_SOURCE
#include "recorder.h"
#include "flight.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

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
    if (!r->offline) {                /* a flight trace never touches the target */
        ls_start_samplers(r);
        if (r->generic && r->child && !r->nloops)
            ls_child_runs(r);
    }
    ls_sink_loop(r, loop, pid, tid, ts);
    r->loops[r->nloops] = (struct ls_loop_info){ .id = loop, .last_ts = r->attach_ns,
                                                 .pid = pid, .tid = tid, .seen = ts };
    return &r->loops[r->nloops++];
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

/* The task an accepted record names: its entry in r->rows (NULL when the
 * table is full), and a tasks row in any case, so events never name a
 * task missing from tasks. */
ls_task *ls_task_seen(recorder *r, uint64_t loop, uint64_t id)
{
    bool made;
    ls_task *a = ls_tasks_get(r->rows, id, loop, &made);
    if (!a) {                         /* not tracked: make sure of the row */
        ls_sink_task_unknown(r, id, loop);
        return NULL;
    }
    return a;
}

void ls_task_row(recorder *r, ls_task *a, uint64_t loop, uint64_t id)
{
    if (!a || a->user != LS_ROW_NONE)
        return;
    ls_sink_task_unknown(r, id, loop);
    a->user = LS_ROW_PLACEHOLDER;
}

static bool ls_in_list(int v, const int *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] == v)
            return true;
    return false;
}

/* The trust boundary for lifecycle records: a record is accepted only if
 * its kind is a lifecycle probe, its task id is set where one is needed,
 * its enum argument is in its list, and its time lies between the last
 * record of its loop and the kernel's time of the message carrying it.
 * Everything after this function may trust those fields. */
static bool ls_rec_valid(const struct evl_rec *e, int64_t not_before, int64_t not_after)
{
#define LS_V(n, v, s) v,
    static const int reasons[] = { EVL_SUSPEND_LIST(LS_V) };
    static const int wakers[] = { EVL_WAKER_LIST(LS_V) };
    static const int leaks[] = { EVL_LEAK_LIST(LS_V) };
#undef LS_V
    static const int finals[] = { EVL_FINAL_FINISHED, EVL_FINAL_FAILED, EVL_FINAL_CANCELLED };
#define LS_N(a) (sizeof(a) / sizeof(a[0]))
    if ((int64_t)e->ts < not_before || (int64_t)e->ts > not_after || e->ts > INT64_MAX)
        return false;
    switch (e->kind) {
    case EVL_PROBE_ID_task_create:
    case EVL_PROBE_ID_task_run:
    case EVL_PROBE_ID_task_cancel:
        return e->task != 0;
    case EVL_PROBE_ID_task_suspend:
        return e->task && ls_in_list((int)e->a32, reasons, LS_N(reasons));
    case EVL_PROBE_ID_task_wake:
        return e->task && ls_in_list((int)e->a32, wakers, LS_N(wakers));
    case EVL_PROBE_ID_task_finish:
        return e->task && ls_in_list((int)e->a32, finals, LS_N(finals));
    case EVL_PROBE_ID_task_leak:
        return e->task && ls_in_list((int)e->a32, leaks, LS_N(leaks));
    case EVL_PROBE_ID_poll_enter:
    case EVL_PROBE_ID_poll_exit:
    case EVL_PROBE_ID_callback_begin:
    case EVL_PROBE_ID_callback_end:
        return true;
    default:                          /* loop_start/stop/batch are not records */
        return false;
    }
#undef LS_N
}

/* One record of a batch: e points at `avail` readable bytes (>= sizeof *e,
 * e->size checked by the caller). */
static void ls_ingest_rec(recorder *r, struct ls_loop_info *li, const struct evl_rec *e,
                          size_t avail, int64_t msg_ts)
{
    uint64_t loop = li->id;
    if (!ls_rec_valid(e, li->last_ts, msg_ts)) {
        if ((int64_t)e->ts < r->attach_ns && (int64_t)e->ts >= 0 && e->kind <= EVL_PROBE_ID_callback_end)
            return;                   /* made before this recording began */
        r->rejected++;
        return;
    }
    if (r->rec_until && (int64_t)e->ts > r->rec_until)
        return;                       /* a flight trace: after its window */
    li->last_ts = (int64_t)e->ts;
    int64_t reason = e->a32;
    ls_task *a = e->task ? ls_task_seen(r, loop, e->task) : NULL;
    bool pre = false;
    switch (e->kind) {
    case EVL_PROBE_ID_task_create: {
        size_t n = e->a32 & ~EVL_REC_PREEXISTING;
        if (n > avail - sizeof(*e))
            n = avail - sizeof(*e);
        if (n > EVL_NAME_MAX - 1)
            n = EVL_NAME_MAX - 1;
        pre = e->a32 & EVL_REC_PREEXISTING;
        if (pre && a && a->user == LS_ROW_CREATED)
            return;                   /* a snapshot repeated for a task we know */
        ls_syms *syms = ls_get_syms(r);
        const ls_sym *sym = syms ? ls_syms_lookup(syms, e->a1) : NULL;
        ls_sink_task(r, &(ls_task_rec){ .task = e->task, .loop = loop, .parent = e->a0,
                                         .name = (const char *)(e + 1), .len = n,
                                         .function = sym ? sym->function : NULL,
                                         .fn_addr = e->a1, .created = (int64_t)e->ts,
                                         .preexisting = pre });
        if (a)
            a->user = LS_ROW_CREATED;
        else if (!pre)
            r->untracked++;
        r->tasks_created++;
        reason = pre;
        break;
    }
    /* A task's last events: its entry goes (a leak verdict after the
     * finish makes sure of the row again, ignored). */
    case EVL_PROBE_ID_task_leak:
        ls_task_row(r, a, loop, e->task);
        ls_sink_task_leak(r, e->task, (int)e->a32);
        if (a)
            ls_tasks_remove(r->rows, a);
        break;
    case EVL_PROBE_ID_task_finish:
        ls_sink_task_finish(r, e->task, loop, (int64_t)e->ts, (int)e->a32, (int64_t)e->a0);
        if (a)
            ls_tasks_remove(r->rows, a);
        r->tasks_finished++;
        break;
    default:
        if (e->task)
            ls_task_row(r, a, loop, e->task);
        break;
    }
    ls_sink_event(r, &(ls_event){ .ts = (int64_t)e->ts, .loop = loop, .task = e->task,
                                  .kind = e->kind, .reason = reason, .arg0 = (int64_t)e->a0,
                                  .arg1 = (int64_t)e->a1 });
    r->records++;
}

/* Drain the ring buffer for at most `budget_ns`, so that a producer
 * faster than SQLite cannot keep the recorder from stopping or committing.
 * Returns messages consumed, or -1 when the budget ran out first. */
int ls_consume(recorder *r, int64_t budget_ns)
{
    r->consume_until = ls_now() + budget_ns;
    int n = ring_buffer__consume(r->rb);
    return n == -EAGAIN ? -1 : n;
}

/* Generic mode: a window of a loop thread's iterations (written by the BPF
 * side from kernel times, not by the target). */
static void ls_on_window(recorder *r, struct ls_loop_info *li, const struct ls_window *w)
{
    if (w->end_ns < w->start_ns || w->end_ns > INT64_MAX)
        return;
    uint64_t n = 0;
    for (int b = 0; b < LS_HIST_BUCKETS; b++) {
        li->hist[b] += w->hist[b];
        li->hist_ns[b] += w->hist_ns[b];
        n += w->hist[b];
    }
    if (!n && !w->wait_ns && !w->busy_ns)
        return;                       /* nothing happened: no row */
    ls_sink_window(r, li->id, w);
}

/* At the end: the windows still being summed in BPF, then each loop's
 * iteration histogram. */
static void ls_flush_window(recorder *r, uint32_t key, void *v)
{
    struct ls_window *w = &((struct ls_gloop *)v)->w;
    struct ls_loop_info *li = ls_loop_seen(r, key, (uint32_t)r->pid, key, (int64_t)w->start_ns);
    if (!li)
        return;
    w->end_ns = (uint64_t)r->detach_ns;   /* the last window ends there */
    ls_on_window(r, li, w);
}

void ls_flush_windows(recorder *r)
{
    if (!r->generic)
        return;
    _Static_assert(sizeof(struct ls_gloop) % 8 == 0, "gloops value: no tail padding");
    if (r->skel && !r->offline &&
        bpf_map__value_size(r->skel->maps.gloops) == sizeof(struct ls_gloop))
        ls_map_each(r, r->skel->maps.gloops, ls_flush_window);
    for (size_t i = 0; i < r->nloops; i++)
        for (int b = 0; b < LS_HIST_BUCKETS; b++)
            if (r->loops[i].hist[b])
                ls_sink_hist(r, r->loops[i].id, b ? 1ll << b : 0, 2ll << b,
                              r->loops[i].hist[b], r->loops[i].hist_ns[b]);
}

/* The end of user space on x86-64: a target's address at or past it is
 * a lie. */
#define LS_USER_END (1ull << 47)

/* pub (and every address the recorder reads or writes in the target) is
 * the target's word: it must look like an aligned user address, and the
 * access goes through the kernel's checks on the target's own memory. */
static bool ls_pub_plausible(uint64_t pub)
{
    return pub && pub % 8 == 0 && pub < LS_USER_END - sizeof(struct evl_loop_pub);
}

bool ls_read_pub(recorder *r, uint64_t pub, struct evl_loop_pub *cur)
{
    if (!ls_pub_plausible(pub))
        return false;
    struct iovec local = { cur, sizeof(*cur) };
    struct iovec remote = { (void *)(uintptr_t)pub, sizeof(*cur) };
    return process_vm_readv(r->pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof(*cur);
}

/* Write n bytes at offset off of the loop's evl_loop_pub: false if pub
 * does not look like one or the write failed. */
bool ls_write_pub(recorder *r, uint64_t pub, size_t off, const void *src, size_t n)
{
    if (!ls_pub_plausible(pub))
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

/* Ask a loop for its task snapshot again (evl-probes.h: snapshot_req).
 * Needed when the loop did not see our attach as a rise of the semaphore:
 * another tracer is attached, or the previous one left while the loop
 * slept.  A repeated snapshot is harmless (known tasks are skipped).
 * Returns the request written, 0 if none could be. */
static uint32_t ls_request_snapshot(recorder *r, uint64_t pub)
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
    if (r->generic || r->target_gone || r->offline)
        return;
    size_t asked = 0;
    for (size_t i = 0; i < r->nloops; i++) {
        struct ls_loop_info *li = &r->loops[i];
        li->flush_req = li->stopped ? 0 : ls_request_snapshot(r, li->pub);
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

#define LS_CHECK_BYTES 32768

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

/* A message whose time has come: into the flight recorder's ring, or
 * stored. */
void ls_take_msg(recorder *r, const void *data, size_t size)
{
    if (r->capped_ns)
        r->after_cap++;               /* past --max-size: read, released, not stored */
    else if (r->flight)
        ls_flight_on_msg(r, data, size);  /* into the ring (flight.c) */
    else
        ls_ingest_msg(r, data, size);
}

int ls_on_msg(void *ctx, void *data, size_t size)
{
    recorder *r = ctx;
    const struct ls_msg_hdr *h = data;
    int type = size >= sizeof(*h) ? (int)h->type : -1;
    bool ref = type == LS_MSG_BATCH_REF;
    if (ref || type == LS_MSG_BATCH)
        r->batches_in++;
    /* While the CPUs are busy, kept batches wait in the backlog, and so
     * does all that comes after them (backlog.c). */
    if (r->backlog.mem && ((ref && !r->backlog.spare) || r->backlog.n) &&
        type != LS_MSG_BLOCK) {
        ls_backlog_add(r, data, size, ref);
    } else {
        if (type == LS_MSG_BLOCK)
            ls_backlog_drain(r, 0);   /* the loop stalled: all of it, now */
        const struct ls_batch_ref *b;
        if (ref) {
            if (!r->ref_buf)
                r->ref_buf = malloc(sizeof(*h) + EVL_BATCH_BYTES);
            struct ls_msg_hdr *m = (struct ls_msg_hdr *)(void *)r->ref_buf;
            if ((b = ls_batch_ref(r, data, size)) && ls_read_batch(r, h, b, m))
                ls_take_msg(r, m, sizeof(*h) + b->len);
        } else {
            ls_take_msg(r, data, size);
        }
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
    if (keepable && !li->reader && !r->offline && !r->no_batch && !r->generic) {
        uint32_t one = 1;
        ls_write_pub(r, pub, offsetof(struct evl_loop_pub, reader), &one, sizeof(one));
        li->reader = true;            /* asked: not again */
    }
    if (!li->snapshot_asked) {
        li->snapshot_asked = true;
        if (!r->offline)
            ls_request_snapshot(r, pub);
    }
}

void ls_ingest_msg(recorder *r, const void *data, size_t size)
{
    const struct ls_msg_hdr *h = data;
    if (size < sizeof(*h) || h->len > size - sizeof(*h))
        return;
    const uint8_t *p = (const uint8_t *)(h + 1);
    struct ls_loop_info *li = NULL;
    if (h->type != LS_MSG_BLOCK &&
        !(li = ls_loop_seen(r, h->loop, h->pid, h->tid, (int64_t)h->ts))) {
        r->rejected_msgs++;           /* more loop ids than any real program */
        return;
    }
    switch (h->type) {
    case LS_MSG_LOOP_START:
        ls_loop_started(r, li, h);
        if (!r->generic)              /* generic traces have no events */
            ls_sink_event(r, &(ls_event){ .ts = (int64_t)h->ts, .loop = h->loop,
                                          .kind = EVL_PROBE_ID_loop_start, .reason = h->tid,
                                          .arg0 = (int64_t)h->arg });
        break;
    case LS_MSG_LOOP_STOP:
        li->stopped = (int64_t)h->ts;
        ls_sink_loop_stop(r, h->loop, (int64_t)h->ts);
        if (!r->generic)
            ls_sink_event(r, &(ls_event){ .ts = (int64_t)h->ts, .loop = h->loop,
                                          .kind = EVL_PROBE_ID_loop_stop, .reason = h->tid });
        break;
    case LS_MSG_WINDOW:
        if (h->len >= sizeof(struct ls_window))
            ls_on_window(r, li, (const struct ls_window *)(const void *)p);
        break;
    case LS_MSG_BLOCK:
        ls_on_block(r, h);
        break;
    case LS_MSG_BATCH:
    case LS_MSG_REC:
        if (r->generic)
            break;
        ls_loop_batch(r, li, h);
        for (size_t off = 0; off + sizeof(struct evl_rec) <= h->len;) {
            const struct evl_rec *e = (const struct evl_rec *)(const void *)(p + off);
            if (e->size < sizeof(*e) || e->size % 8 || e->size > h->len - off) {
                r->rejected++;        /* no framing left to trust: drop the rest */
                break;
            }
            ls_ingest_rec(r, li, e, e->size, (int64_t)h->ts);
            off += e->size;
        }
        break;
    }
}
