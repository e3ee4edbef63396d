/*
 * live.c -- `loopscope top`'s side of the recorder (live.h): the live
 * source (ls_live_run drives the engine with `top`'s options; the main
 * loop's tick and end call the hooks with what the recorder knows), and
 * the live sink (sink.h), which feeds the one replay of task states
 * (model/replay.h) and calls the hooks with each record accepted.  It also
 * keeps the innermost application frame of each recent stack: blocks.c
 * symbolizes a stack once (later episodes on the same stack reuse its id),
 * so the site is kept by stack id here.  Part of the recorder
 * (recorder.h).
 */
#define _GNU_SOURCE
#include "recorder.h"

#include <stdlib.h>
#include <string.h>

#include "syscalls.h"                 /* ls_syscall_names, generated (CMakeLists.txt) */

/* The site of a stack: its innermost application frame.  A cache of the
 * latest LS_STACK_IDS stack ids (ids grow by one), so a stack seen again
 * after 4096 newer ones shows no site. */
struct site {
    int64_t id;
    bool have;
    char *function, *file;
    int line;
};

struct ls_live {
    recorder *r;
    const ls_live_hooks *h;
    ls_replay *replay;        /* the live tasks */
    struct site *sites;       /* LS_STACK_IDS of them, made at the first frame */
    struct { uint64_t loop; int64_t at; } *stops;  /* loops stopped, in order */
    size_t nstops, stops_cap;
};

static struct site *site_of(struct ls_live *l, int64_t id)
{
    if (!l->sites)
        l->sites = calloc(LS_STACK_IDS, sizeof(*l->sites));
    if (!l->sites || id <= 0)
        return NULL;
    return &l->sites[(uint64_t)id % LS_STACK_IDS];
}

/* ------------------------------------------------------------- the sink */

static void lv_frame(void *s, int64_t stack_id, int depth, uint64_t pc, const ls_sym *f, bool app)
{
    struct ls_live *l = s;
    (void)depth;
    (void)pc;
    if (!l->h->block)
        return;
    struct site *si = site_of(l, stack_id);
    if (!si)
        return;
    if (si->id != stack_id) {         /* a new stack takes the slot */
        free(si->function);
        free(si->file);
        *si = (struct site){ .id = stack_id };
    }
    if (si->have || !app)
        return;
    si->have = true;
    si->function = f->function ? strdup(f->function) : NULL;
    si->file = f->file ? strdup(f->file) : NULL;
    si->line = f->line;
}

static void lv_block(void *s, const ls_block_rec *b)
{
    struct ls_live *l = s;
    if (!l->h->block)
        return;
    struct site *si = site_of(l, b->stack);
    if (si && si->id != b->stack)
        si = NULL;
    ls_live_block lb = {
        .loop = b->loop, .task = b->task, .kind = b->kind, .syscall = b->syscall,
        .syscall_name = b->syscall >= 0 && (uint64_t)b->syscall < sizeof(ls_syscall_names) /
                                                                  sizeof(ls_syscall_names[0])
                            ? ls_syscall_names[b->syscall] : NULL,
        .start = b->start, .dur = b->dur, .task_name = b->task_name,
        .function = si ? si->function : NULL, .file = si ? si->file : NULL,
        .line = si ? si->line : 0,
    };
    l->h->block(l->h->ctx, &lb);
}

static void lv_task(void *s, const ls_task_rec *t)
{
    struct ls_live *l = s;
    if (l->h->task_created)
        l->h->task_created(l->h->ctx, t->loop, t->task, t->name, t->len, t->preexisting);
}

/* A lifecycle record: the replay, then the hook (loop_start and loop_stop
 * are events but not records: neither sees them). */
static void lv_event(void *s, const ls_event *e)
{
    struct ls_live *l = s;
    if (e->kind == EVL_PROBE_ID_loop_start || e->kind == EVL_PROBE_ID_loop_stop)
        return;
    ls_replay_event(l->replay, e);
    if (l->h->event)
        l->h->event(l->h->ctx, e);
}

static void lv_window(void *s, uint64_t loop, const struct ls_window *w)
{
    struct ls_live *l = s;
    if (!l->h->window)
        return;
    ls_live_window lw = {
        .loop = loop, .start = (int64_t)w->start_ns, .end = (int64_t)w->end_ns,
        .iterations = w->iterations, .wait_ns = w->wait_ns, .busy_ns = w->busy_ns,
        .max_busy_ns = w->max_busy_ns, .hist = w->hist, .nbuckets = LS_HIST_BUCKETS,
    };
    l->h->window(l->h->ctx, &lw);
}

static void lv_loop_stop(void *s, uint64_t loop, int64_t stopped)
{
    struct ls_live *l = s;
    if (l->nstops == l->stops_cap) {
        size_t cap = l->stops_cap ? 2 * l->stops_cap : 8;
        void *a = realloc(l->stops, cap * sizeof(*l->stops));
        if (!a)
            return;
        l->stops = a;
        l->stops_cap = cap;
    }
    l->stops[l->nstops].loop = loop;
    l->stops[l->nstops++].at = stopped;
}

/* The end: the stopped loops' spans end at their stop, the rest at end_ns
 * (the replay calls task_done for each task still unfinished). */
static int lv_end(void *s, int64_t end_ns)
{
    struct ls_live *l = s;
    for (size_t i = 0; i < l->nstops; i++)
        ls_replay_loop_stop(l->replay, l->stops[i].loop, l->stops[i].at);
    ls_replay_end(l->replay, end_ns);
    return 0;
}

static void lv_free(void *s)
{
    struct ls_live *l = s;
    if (l->sites)
        for (size_t i = 0; i < LS_STACK_IDS; i++) {
            free(l->sites[i].function);
            free(l->sites[i].file);
        }
    free(l->sites);
    free(l->stops);
    ls_replay_free(l->replay);
    if (l->r->live_state == l)
        l->r->live_state = NULL;
    free(l);
}

static const ls_sink_ops live_sink = {
    .name = "live",
    .loop_stop = lv_loop_stop,
    .task = lv_task,
    .event = lv_event,
    .window = lv_window,
    .frame = lv_frame,
    .block = lv_block,
    .end = lv_end,
    .free = lv_free,
};

/* The replay's one callback. */
static void task_done(void *ctx, const ls_task *t, bool finished)
{
    struct ls_live *l = ctx;
    if (l->h->task_done)
        l->h->task_done(l->h->ctx, t, finished);
}

int ls_live_sink_add(recorder *r)
{
    struct ls_live *l = calloc(1, sizeof(*l));
    if (!l)
        return ls_error("out of memory");
    l->r = r;
    l->h = r->live;
    ls_replay_ops ops = { .on_task_done = task_done, .ctx = l, .spans_only = true };
    if (!(l->replay = ls_replay_new(&ops, LS_TASKS_MAX)) || ls_sink_add(r, &live_sink, l) < 0) {
        ls_replay_free(l->replay);
        free(l);
        return ls_error("out of memory");
    }
    r->live_state = l;
    return 0;
}

/* ------------------------------------------------------ the live source */

static ls_live_status status_now(recorder *r, int64_t now)
{
    return (ls_live_status){
        .pid = r->pid, .binary = r->binary, .generic = !r->dec->tasks, .start_ns = r->start_ns,
        .now = now, .nloops = r->nloops, .tasks_created = r->tasks_created,
        .tasks_finished = r->tasks_finished, .records = r->records, .blocks = r->blocks,
        .dropped = ls_stat(r, LS_STAT_DROPPED_MSGS), .rejected = r->rejected + r->rejected_msgs,
        .untracked = r->untracked, .replay = r->live_state ? r->live_state->replay : NULL,
    };
}

void ls_live_tick(recorder *r, int64_t now, const char **why, bool *stop)
{
    ls_live_status st = status_now(r, now);
    if (r->live->tick && r->live->tick(r->live->ctx, &st)) {
        *why = "stopped by the user";
        *stop = true;
    }
}

void ls_live_stopped(recorder *r, const char *why)
{
    if (r->live && r->live->stopped) {
        ls_live_status st = status_now(r, ls_now());
        r->live->stopped(r->live->ctx, &st, why);
    }
}

int ls_live_run(const ls_live_opts *o, const ls_live_hooks *h)
{
    recorder rr = { .pid = o->pid, .out = o->out, .force = o->force, .duration = o->duration,
                    .ringbuf_kb = 65536, .quiet = true, .live = h, .pidfd = -1, .go_pipe = -1,
                    .census_ms = 10, .task_probe_rate = 2000,  /* a CPython target's tasks */
                    /* not idle: a starved idle recorder is raised after
                     * LS_PRIO_STALL_NS, a second without a redraw */
                    .priority = LS_PRIO_BATCH,
                    .block_threshold_ms = o->block_threshold_ms > 0 ? o->block_threshold_ms : 10,
                    .mode = o->mode == 1 ? LS_MODE_LIBEVL : o->mode == 2 ? LS_MODE_GENERIC
                                                                       : LS_MODE_AUTO };
    recorder *r = &rr;
    const char *why = "";
    r->argc = o->argc;
    r->argv = o->argv;
    int err = ls_recorder_open(r);
    if (!err) {
        err = ls_recorder_run(r, &why);
        err = ls_recorder_stop(r, err, why);
    }
    ls_recorder_free(r);
    return err;
}
