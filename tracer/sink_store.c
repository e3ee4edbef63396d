/*
 * sink_store.c -- the SQLite trace (store.c) as a sink of the recorder's
 * pipeline (sink.h): each record to its store writer; at the end, the
 * derived tables replayed from the stored events (model/derive.h) and the
 * file finished.  Part of the recorder (recorder.h).
 */
#define _GNU_SOURCE
#include "recorder.h"

static void st_meta(void *s, const char *key, const char *value)
{
    ls_store_meta(s, key, "%s", value);
}

static void st_process(void *s, const ls_proc_rec *p) { ls_store_process(s, p); }

static void st_loop(void *s, uint64_t loop, uint32_t pid, uint32_t tid, int64_t seen)
{
    ls_store_loop(s, loop, pid, tid, seen);
}

static void st_loop_stop(void *s, uint64_t loop, int64_t stopped)
{
    ls_store_loop_stop(s, loop, stopped);
}

static void st_task(void *s, const ls_task_rec *t)
{
    ls_store_task_create(s, t->task, t->loop, t->parent, t->name, t->len, t->function,
                         t->fn_addr, t->created, t->preexisting);
}

static void st_task_unknown(void *s, uint64_t task, uint64_t loop)
{
    ls_store_task_unknown(s, task, loop);
}

static void st_task_named(void *s, uint64_t task, uint64_t loop, const char *name, size_t len)
{
    ls_store_task_named(s, task, loop, name, len);
}

static void st_task_leak(void *s, uint64_t task, int kind) { ls_store_task_leak(s, task, kind); }

static void st_task_finish(void *s, uint64_t task, uint64_t loop, int64_t ended, int state,
                           int64_t error)
{
    ls_store_task_finish(s, task, loop, ended, state, error);
}

static void st_event(void *s, const ls_event *e)
{
    ls_store_event(s, e->ts, e->loop, e->task, e->kind, e->reason, e->arg0, e->arg1);
}

static void st_window(void *s, uint64_t loop, const struct ls_window *w)
{
    ls_store_window(s, loop, (int64_t)w->start_ns, (int64_t)w->end_ns, w->iterations,
                    w->wait_ns, w->busy_ns, w->max_busy_ns);
}

static void st_hist(void *s, uint64_t loop, int64_t lo, int64_t hi, uint64_t count,
                    uint64_t busy_ns)
{
    ls_store_hist(s, loop, lo, hi, count, busy_ns);
}

static void st_frame(void *s, int64_t stack, int depth, uint64_t pc, const ls_sym *f, bool app)
{
    (void)app;
    ls_store_frame(s, stack, depth, pc, f);
}

static void st_stack(void *s, int64_t stack, int depth) { ls_store_stack(s, stack, depth); }
static void st_await_stack(void *s, uint64_t task, int64_t ts, int64_t stack)
{
    ls_store_await_stack(s, task, ts, stack);
}

static void st_block(void *s, const ls_block_rec *b)
{
    ls_store_blocking(s, b->loop, b->task, b->start, b->dur, b->kind, b->syscall, b->stack);
}

static void st_syscall_stat(void *s, uint64_t loop, uint32_t tid, uint32_t nr, uint64_t count,
                            uint64_t total_ns, uint64_t max_ns)
{
    ls_store_syscall_stat(s, loop, tid, nr, count, total_ns, max_ns);
}

/* The derived tables (open spans end at end_ns; at most LS_TASKS_MAX
 * live tasks tracked, as while recording), indexes, the file closed:
 * the store is gone afterwards, even on error. */
static int st_end(void *s, int64_t end_ns)
{
    char errbuf[512];
    int err = 0;
    ls_store_flush(s);
    if (ls_derive_all(ls_store_db(s), end_ns, LS_TASKS_MAX, errbuf, sizeof(errbuf)) < 0)
        err = ls_error("cannot derive the trace's tables (the viewer derives them on first "
                       "read): %s", errbuf);
    if (ls_store_finish(s, errbuf, sizeof(errbuf)) < 0)
        err = ls_error("%s", errbuf);
    return err;
}

const ls_sink_ops ls_store_sink = {
    .name = "store",
    .meta = st_meta,
    .process = st_process,
    .loop = st_loop,
    .loop_stop = st_loop_stop,
    .task = st_task,
    .task_unknown = st_task_unknown,
    .task_named = st_task_named,
    .task_leak = st_task_leak,
    .task_finish = st_task_finish,
    .event = st_event,
    .window = st_window,
    .hist = st_hist,
    .frame = st_frame,
    .stack = st_stack,
    .await_stack = st_await_stack,
    .block = st_block,
    .syscall_stat = st_syscall_stat,
    .end = st_end,
};
