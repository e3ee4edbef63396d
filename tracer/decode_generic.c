/*
 * decode_generic.c -- the generic loop mode's decoder (decode.h): any
 * process whose loop threads wait in epoll_wait (or, with --wait-calls
 * all, poll and select), seen from the kernel's side.  Its messages are
 * windows of a loop thread's iterations (summed in BPF) and blocking
 * episodes (blocks.c), whose task, in a CPython target, is the asyncio
 * task the stack walker found; at the end, the windows still summed in
 * BPF and each thread's iteration histogram.  Also the wait-call
 * programs it attaches and its meta.  Part of the recorder (recorder.h).
 */
#define _GNU_SOURCE
#include "recorder.h"

#include <stdio.h>
#include <string.h>

/* Generic mode: a window of a loop thread's iterations (written by the BPF
 * side from kernel times, not by the target). */
static void on_window(recorder *r, struct ls_loop_info *li, const struct ls_window *w)
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

/* The time a loop thread's open window has been summed up to: the window
 * starts at a wait entry (or where the thread was first seen), each wait
 * is added at its return and each busy stretch at the next entry, so its
 * wait + busy reach exactly its last entry while it waits, its last
 * return while it runs. */
static uint64_t summed_to(const struct ls_gloop *g)
{
    uint64_t t = g->in_wait ? g->enter_ns : g->since;
    return t > g->w.start_ns ? t : g->w.start_ns;
}

/* At the end: the windows still being summed in BPF, then each loop's
 * iteration histogram.  The last window ends at the detach, and what the
 * BPF side had not added yet is added here: the wait the thread is still
 * asleep in (a loop idle when the recording stops: without it, its last
 * window is mostly time neither busy nor waiting), or the busy stretch it
 * is still in (not an iteration: it has not ended, so no count and no
 * histogram entry).  A wait entered or returned from between the detach
 * time and the programs' removal ends the window there instead. */
static void flush_window(recorder *r, uint32_t key, void *v)
{
    struct ls_gloop *g = v;
    struct ls_window *w = &g->w;
    struct ls_loop_info *li = ls_loop_seen(r, key, (uint32_t)r->pid, key, (int64_t)w->start_ns);
    if (!li)
        return;
    if (!g->epoll && g->polls)
        r->poll_loops++;
    uint64_t end = r->detach_ns > 0 ? (uint64_t)r->detach_ns : 0, to = summed_to(g);
    if (to >= end) {
        end = to;                     /* nothing open to add */
    } else if (g->in_wait) {
        w->wait_ns += end - to;       /* asleep in its wait until the end */
    } else if (g->since) {
        w->busy_ns += end - to;       /* running since its last return */
    }
    w->end_ns = end;
    on_window(r, li, w);
}

/* At the end: the on-CPU episodes still open, the windows still being
 * summed in BPF, then each loop's iteration histogram. */
static void flush(recorder *r)
{
    ls_asyncio_end(r);
    if (!r->no_blocking && r->skel)
        ls_flush_open_map(r, r->skel->maps.oncpu_open);
    _Static_assert(sizeof(struct ls_gloop) % 8 == 0, "gloops value: no tail padding");
    if (r->skel && !r->offline &&
        bpf_map__value_size(r->skel->maps.gloops) == sizeof(struct ls_gloop))
        ls_map_each(r, r->skel->maps.gloops, flush_window);
    for (size_t i = 0; i < r->nloops; i++)
        for (int b = 0; b < LS_HIST_BUCKETS; b++)
            if (r->loops[i].hist[b])
                ls_sink_hist(r, r->loops[i].id, b ? 1ll << b : 0, 2ll << b,
                             r->loops[i].hist[b], r->loops[i].hist_ns[b]);
}

/* An episode still open: unless the loop thread had entered its wait
 * since (in its same step). */
static int64_t open_end(recorder *r, uint32_t tid, const struct ls_block *b, int64_t end)
{
    struct ls_gloop g;
    if (bpf_map__lookup_elem(r->skel->maps.gloops, &tid, sizeof(tid), &g, sizeof(g), 0) == 0 &&
        g.in_wait && g.steps == b->steps && (int64_t)g.enter_ns < end)
        return (int64_t)g.enter_ns;
    return end;
}

static void msg(recorder *r, struct ls_loop_info *li, const struct ls_msg_hdr *h)
{
    if (h->type == LS_MSG_WINDOW && h->len >= sizeof(struct ls_window))
        on_window(r, li, (const struct ls_window *)(const void *)(h + 1));
}

/* The asyncio task a blocking episode happened in, as a tasks row named
 * after it; its id is a hash of the Task's address and name (an address
 * is reused once a task is freed).  0 if none. */
static uint64_t block_task(recorder *r, const struct ls_msg_hdr *h, const struct ls_pystack *py,
                           const char **name_out)
{
    const char *name = r->py && py->task ? ls_py_task_name(r->py, py) : NULL;
    *name_out = name;
    if (!name)
        return 0;
    uint64_t id = ls_asyncio_task_id(r, py->task);   /* the census's row */
    if (id)
        return id;
    size_t n = strlen(name);
    uint64_t x = 1469598103934665603ull;
    for (int i = 0; i < 8; i++)
        x = (x ^ ((py->task >> (8 * i)) & 0xff)) * 1099511628211ull;
    for (size_t i = 0; i < n; i++)
        x = (x ^ (uint8_t)name[i]) * 1099511628211ull;
    x &= INT64_MAX;
    ls_sink_task_named(r, x ? x : 1, h->loop, n ? name : "?", n ? n : 1);
    return x ? x : 1;
}

static int tick_ms(const recorder *r)
{
    return r->py && !r->no_tasks ? r->census_ms : 0;
}

static void configure(recorder *r)
{
    r->skel->rodata->generic = true;
    ls_choose_programs(r, true);
    r->backlog_limit = 0;             /* only kept batches wait in the backlog */
}

/* Threads already asleep in a wait call are loop threads from the start. */
static void started(recorder *r)
{
    if (!r->child)
        ls_find_waiting_threads(r);
}

/* A command we started: its runtime is looked at again once it runs.
 * (Its symbols are made at the first episode, when every library it
 * loads at its start is mapped.) */
static void loop_new(recorder *r)
{
    if (r->child && !r->nloops)
        ls_child_runs(r);
}

static void meta_start(recorder *r)
{
    ls_sink_meta(r, LS_META_MODE, "generic");
    ls_sink_meta(r, LS_META_WAIT_CALLS, "%s", r->wait_calls == LS_WAIT_ALL     ? "all"
                                              : r->wait_calls == LS_WAIT_EPOLL ? "epoll"
                                                                               : "auto");
    ls_sink_meta(r, LS_META_WAIT_HOOK, "%s", r->wait_hook == LS_HOOK_RAW      ? "raw"
                                             : r->wait_hook == LS_HOOK_SWITCH ? "switch"
                                                                              : "tracepoint");
    ls_sink_meta(r, LS_META_WINDOW_NS, "%llu", (unsigned long long)LS_WINDOW_NS);
}

static void meta_end(recorder *r)
{
    ls_asyncio_meta(r);
    ls_sink_meta(r, LS_META_UNTRACKED_WAIT_CALLS, "%llu",
                 (unsigned long long)ls_stat(r, LS_STAT_UNTRACKED_WAITS));
    ls_sink_meta(r, LS_META_STALE_WAITS, "%llu",
                 (unsigned long long)ls_stat(r, LS_STAT_STALE_WAITS));
    uint64_t unnamed = 0, jit = r->syms ? ls_syms_jit_frames(r->syms, &unnamed) : 0;
    if (!jit)
        return;
    /* JIT code in the stacks (Node.js): named from its perf map, if the
     * target writes one (tracer/JIT.md). */
    const char *hint = !unnamed ? ""
                       : ls_syms_has_perfmap(r->syms) ? " (not in the perf map)" : LS_JIT_HINT;
    ls_sink_meta(r, LS_META_JIT_SYMBOLS, "%s; %llu of %llu JIT frames unnamed%s",
                 ls_syms_perfmap_status(r->syms), (unsigned long long)unnamed,
                 (unsigned long long)jit, hint);
    if (unnamed && !r->quiet && !ls_syms_has_perfmap(r->syms))
        fprintf(stderr, "JS frames: %llu of %llu unnamed%s\n", (unsigned long long)unnamed,
                (unsigned long long)jit, hint);
}

/* Application code: Python frames outside the standard library, JS
 * frames outside node's internals, native frames outside the system's
 * libraries and the interpreter (the rule of the viewer's app_frames
 * view, viewer/trace.c). */
static bool app_frame(const recorder *r, const ls_sym *f)
{
    const char *m = f->module ? f->module : "";
    if (!strcmp(m, "python"))
        return !(f->file && (strstr(f->file, "/lib/python") || ls_has_prefix(f->file, "<frozen ")));
    if (!strcmp(m, "[jit]"))
        return !(f->function && strstr(f->function, "node:"));
    if (ls_system_module(m) || strstr(m, "/libpython") || strstr(m, "/lib/python"))
        return false;
    return ls_has_prefix(r->runtime[0] ? r->runtime : "native", "native") || strcmp(m, r->binary);
}

static void status(recorder *r, FILE *out, double el, double dt)
{
    (void)dt;
    fprintf(out, "\rrecording pid %d: %.1fs  loop threads %zu  blocking episodes %llu  "
                 "dropped %llu   ", r->pid, el, r->nloops, (unsigned long long)r->blocks,
            (unsigned long long)ls_stat(r, LS_STAT_DROPPED_MSGS));
}

/* What was recorded; and what the loop threads waited in, or that no
 * thread waited in any of the calls looked at. */
static void summary(recorder *r, FILE *out)
{
    fprintf(out, "recorded %llu blocking episode%s, %llu loop thread%s", (unsigned long long)r->blocks,
            r->blocks == 1 ? "" : "s", (unsigned long long)r->nloops, r->nloops == 1 ? "" : "s");
    if (r->poll_loops)
        fprintf(out, " (%u waiting in poll or select)", r->poll_loops);
    else if (!r->nloops)
        fprintf(out, " (no thread waited in epoll_wait%s: a thread busy throughout, or a loop "
                     "that waits in another call, is not one)",
                r->wait_calls == LS_WAIT_EPOLL ? " (--wait-calls epoll)" : ", poll or select");
}

const ls_decoder ls_decoder_generic = {
    .name = "generic loop mode",
    .tasks = false,
    .configure = configure,
    .attach = ls_attach_generic,
    .started = started,
    .runtime = ls_detect_generic_runtime,
    .tick = ls_asyncio_tick,
    .detaching = ls_asyncio_detaching,
    .tick_ms = tick_ms,
    .loop_new = loop_new,
    .msg = msg,
    .block_task = block_task,
    .open_end = open_end,
    .flush = flush,
    .meta_start = meta_start,
    .meta_end = meta_end,
    .app_frame = app_frame,
    .status = status,
    .summary = summary,
};
