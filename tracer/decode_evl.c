/*
 * decode_evl.c -- the libevl decoder (decode.h): a loop's lifecycle
 * records (struct evl_rec, in batches or one per message with
 * --no-batch), checked at the trust boundary (rec_valid), turned into
 * events and task rows for the sinks, with the bounded table of which
 * tasks have their row (model/tasks.h); the USDT probes it attaches; its
 * meta.  Part of the recorder (recorder.h).
 */
#define _GNU_SOURCE
#include "recorder.h"

#include <stdio.h>
#include <string.h>

/* The task an accepted record names: its entry in r->rows (NULL when the
 * table is full), and a tasks row in any case, so events never name a
 * task missing from tasks. */
static ls_task *task_seen(recorder *r, uint64_t loop, uint64_t id)
{
    bool made;
    ls_task *a = ls_tasks_get(r->rows, id, loop, &made);
    if (!a) {                         /* not tracked: make sure of the row */
        ls_sink_task_unknown(r, id, loop);
        return NULL;
    }
    return a;
}

static void task_row(recorder *r, ls_task *a, uint64_t loop, uint64_t id)
{
    if (!a || a->user != LS_ROW_NONE)
        return;
    ls_sink_task_unknown(r, id, loop);
    a->user = LS_ROW_PLACEHOLDER;
}

static bool in_list(int v, const int *list, size_t n)
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
static bool rec_valid(const struct evl_rec *e, int64_t not_before, int64_t not_after)
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
        return e->task && in_list((int)e->a32, reasons, LS_N(reasons));
    case EVL_PROBE_ID_task_wake:
        return e->task && in_list((int)e->a32, wakers, LS_N(wakers));
    case EVL_PROBE_ID_task_finish:
        return e->task && in_list((int)e->a32, finals, LS_N(finals));
    case EVL_PROBE_ID_task_leak:
        return e->task && in_list((int)e->a32, leaks, LS_N(leaks));
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
static void ingest_rec(recorder *r, struct ls_loop_info *li, const struct evl_rec *e,
                          size_t avail, int64_t msg_ts)
{
    uint64_t loop = li->id;
    if (!rec_valid(e, li->last_ts, msg_ts)) {
        if ((int64_t)e->ts < r->attach_ns && (int64_t)e->ts >= 0 && e->kind <= EVL_PROBE_ID_callback_end)
            return;                   /* made before this recording began */
        r->rejected++;
        return;
    }
    if (r->rec_until && (int64_t)e->ts > r->rec_until)
        return;                       /* a flight trace: after its window */
    li->last_ts = (int64_t)e->ts;
    int64_t reason = e->a32;
    ls_task *a = e->task ? task_seen(r, loop, e->task) : NULL;
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
        task_row(r, a, loop, e->task);
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
            task_row(r, a, loop, e->task);
        break;
    }
    ls_sink_event(r, &(ls_event){ .ts = (int64_t)e->ts, .loop = loop, .task = e->task,
                                  .kind = e->kind, .reason = reason, .arg0 = (int64_t)e->a0,
                                  .arg1 = (int64_t)e->a1 });
    r->records++;
}

static void msg(recorder *r, struct ls_loop_info *li, const struct ls_msg_hdr *h)
{
    switch (h->type) {
    case LS_MSG_LOOP_START:
        ls_loop_started(r, li, h);
        ls_sink_event(r, &(ls_event){ .ts = (int64_t)h->ts, .loop = h->loop,
                                      .kind = EVL_PROBE_ID_loop_start, .reason = h->tid,
                                      .arg0 = (int64_t)h->arg });
        break;
    case LS_MSG_LOOP_STOP:
        ls_sink_event(r, &(ls_event){ .ts = (int64_t)h->ts, .loop = h->loop,
                                      .kind = EVL_PROBE_ID_loop_stop, .reason = h->tid });
        break;
    case LS_MSG_BATCH:
    case LS_MSG_REC: {
        const uint8_t *p = (const uint8_t *)(h + 1);
        ls_loop_batch(r, li, h);
        for (size_t off = 0; off + sizeof(struct evl_rec) <= h->len;) {
            const struct evl_rec *e = (const struct evl_rec *)(const void *)(p + off);
            if (e->size < sizeof(*e) || e->size % 8 || e->size > h->len - off) {
                r->rejected++;        /* no framing left to trust: drop the rest */
                break;
            }
            ingest_rec(r, li, e, e->size, (int64_t)h->ts);
            off += e->size;
        }
        break;
    }
    }
}

/* The running task the loop published: it gets a row if it has none. */
static uint64_t block_task(recorder *r, const struct ls_msg_hdr *h, const struct ls_pystack *py,
                           const char **name)
{
    const struct ls_block *b = (const void *)(h + 1);
    (void)py;
    *name = NULL;
    if (b->task)
        task_row(r, task_seen(r, h->loop, b->task), h->loop, b->task);
    return b->task;
}

/* A loop appears: the symbols' view of the process exists already (made
 * at attach and kept up to date while the target lives by the keeper
 * thread, symbols.h's ls_syms_watch), so that a record held back (the
 * backlog) or read late by a starved recorder is named after a
 * short-lived target has exited; this only makes sure of it. */
static void loop_new(recorder *r)
{
    ls_get_syms(r);
}

static void configure(recorder *r)
{
    r->skel->rodata->generic = false;
    ls_choose_programs(r, false);
    bpf_map__set_max_entries(r->skel->maps.oncpu_open, 1);   /* the generic mode's */
    if (r->no_batch)
        r->backlog_limit = 0;         /* only kept batches wait in the backlog */
}

static void runtime(recorder *r, bool running)
{
    (void)running;
    snprintf(r->runtime, sizeof(r->runtime), "libevl");
}

static void meta_start(recorder *r)
{
    ls_sink_meta(r, LS_META_MODE, "%s", r->no_batch ? "unbatched" : "batched");
}

static void meta_end(recorder *r)
{
    ls_sink_meta(r, LS_META_LOOP_LOST_RECORDS_CLAIMED, "%llu", (unsigned long long)ls_loop_lost(r));
}

/* Application code: not a system library, not libevl's internals. */
static bool app_frame(const recorder *r, const ls_sym *f)
{
    (void)r;
    return !ls_system_module(f->module ? f->module : "") && !ls_has_prefix(f->function, "evl__");
}

static void status(recorder *r, FILE *out, double el, double dt)
{
    static uint64_t last_ev;
    uint64_t ev = r->nevents;
    fprintf(out, "\rrecording pid %d: %.1fs  %.0f events/s  tasks alive %llu  dropped %llu  "
                 "backlog %.1f MiB   ",
            r->pid, el, dt > 0 ? (ev - last_ev) / dt : 0.0,
            (unsigned long long)(r->tasks_created - r->tasks_finished),
            (unsigned long long)ls_stat(r, LS_STAT_DROPPED_MSGS), (r->hold && r->hold->bytes ? r->hold->bytes(r) : 0) / 1048576.0);
    last_ev = ev;
}

static void summary(recorder *r, FILE *out)
{
    fprintf(out, "recorded %llu events, %llu tasks, %llu loop%s", (unsigned long long)r->nevents,
            (unsigned long long)r->tasks_created, (unsigned long long)r->nloops,
            r->nloops == 1 ? "" : "s");
}

const ls_decoder ls_decoder_evl = {
    .name = "libevl mode",
    .tasks = true,
    .configure = configure,
    .attach = ls_attach_evl,
    .runtime = runtime,
    .detaching = ls_flush_loops,
    .loop_new = loop_new,
    .msg = msg,
    .block_task = block_task,
    .meta_start = meta_start,
    .meta_end = meta_end,
    .app_frame = app_frame,
    .status = status,
    .summary = summary,
};
