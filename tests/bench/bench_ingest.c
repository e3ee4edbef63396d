/*
 * bench_ingest.c -- the recorder's own CPU time per event, without a
 * target or BPF: what `loopscope record` does with each message it takes
 * from the ring buffer (tracer/ingest.c and decode_evl.c: check, task
 * rows, the store sink), fed with batches shaped like examples/http_server's under wrk, then the
 * end of the recording (derivation and indexes, model/derive.h), timed
 * apart.
 *
 *   bench_ingest [--quick] [--repeats N] [--n EVENTS_IN_THOUSANDS]
 *
 * The stream: 8 connection tasks; each iteration is a poll_enter, a
 * poll_exit that found 2 or 3 of them readable, their wakes, then for each
 * a run and a suspend on its fd (what the trace of http_server shows, 3.9
 * events a request), 10 us of loop time per request.  Batches are full
 * EVL_BATCH_BYTES buffers, as a busy loop hands them over, and the store
 * commits every LS_COMMIT_NS of that (virtual) time, as the recorder
 * commits every 250 ms of its own: at 400k events/s, every 100k events.
 * The trace goes to a temporary file beside the working directory (the
 * disk a recording would use), removed afterwards.
 *
 * Prints RESULT lines (bench.h): ingest ns/event and end ns/event, CPU
 * time of this process (user + system: SQLite's writes included), best
 * and median of the repeats.  A benchmark: it prints numbers, it does not
 * pass or fail.  Needs no privileges.
 */
#define _GNU_SOURCE
#include "bench.h"
#include "recorder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NTASKS 8
#define LOOP_ID 1
#define STEP_NS 10000           /* loop time per request */

struct feed {
    recorder *r;
    uint8_t msg[sizeof(struct ls_msg_hdr) + EVL_BATCH_BYTES];
    size_t len;                 /* payload bytes so far */
    uint32_t nrec;
    uint64_t now;               /* the loop's clock */
    uint64_t events;
};

static void flush(struct feed *f)
{
    if (!f->nrec)
        return;
    struct ls_msg_hdr *h = (struct ls_msg_hdr *)(void *)f->msg;
    *h = (struct ls_msg_hdr){ .type = LS_MSG_BATCH, .len = (uint32_t)f->len, .ts = f->now,
                              .loop = LOOP_ID, .arg = 0, .pid = (uint32_t)getpid(),
                              .tid = (uint32_t)gettid(), .nrec = f->nrec };
    ls_ingest_msg(f->r, f->msg, sizeof(*h) + f->len);
    f->len = 0;
    f->nrec = 0;
    ls_store_tick(f->r->store, (int64_t)f->now);
}

static void rec(struct feed *f, int kind, uint64_t task, uint32_t a32, uint64_t a0,
                const char *name)
{
    size_t nlen = name ? strlen(name) : 0;
    size_t size = sizeof(struct evl_rec) + (nlen + 7) / 8 * 8;
    if (f->len + size > EVL_BATCH_BYTES)
        flush(f);
    struct evl_rec *e = (struct evl_rec *)(void *)(f->msg + sizeof(struct ls_msg_hdr) + f->len);
    *e = (struct evl_rec){ .ts = f->now, .task = task, .a0 = a0, .a32 = name ? (uint32_t)nlen : a32,
                           .kind = (uint16_t)kind, .size = (uint16_t)size };
    if (name)
        memcpy(e + 1, name, nlen);
    f->len += size;
    f->nrec++;
    f->events++;
    f->now += 30;               /* the loop's time between two records */
}

/* One recording of about n events: CPU ns per event for the ingest and for
 * the end. */
static void run(long n, double *ingest_ns, double *end_ns)
{
    char path[64];
    snprintf(path, sizeof(path), "bench-ingest-%d.db", (int)getpid());
    char err[512];
    recorder *r = calloc(1, sizeof(*r));
    struct feed *f = calloc(1, sizeof(*f));
    BENCH_CHECK(r && f);
    r->pid = getpid();
    r->no_blocking = true;      /* no samplers to start (no BPF here) */
    r->dec = &ls_decoder_evl;
    r->store = ls_store_create(path, true, err, sizeof(err));
    if (!r->store)
        BENCH_DIE("%s", err);
    BENCH_CHECK_EQ(ls_sink_add(r, &ls_store_sink, r->store), 0);
    r->rows = ls_tasks_new(LS_TASKS_MAX);
    BENCH_CHECK(r->rows != NULL);
    f->r = r;
    f->now = 1000000000;
    r->start_ns = r->attach_ns = (int64_t)f->now;

    uint64_t t0 = bench_cpu_ns();
    for (int t = 1; t <= NTASKS; t++)
        rec(f, EVL_PROBE_ID_task_create, (uint64_t)t, 0, 0, "handle_conn");
    for (int t = 1; t <= NTASKS; t++) {
        rec(f, EVL_PROBE_ID_task_run, (uint64_t)t, 0, 0, NULL);
        rec(f, EVL_PROBE_ID_task_suspend, (uint64_t)t, EVL_SUSPEND_IO, (uint64_t)(t + 7), NULL);
    }
    unsigned next = 0;
    while (f->events < (uint64_t)n) {
        rec(f, EVL_PROBE_ID_poll_enter, 0, 0, UINT64_MAX, NULL);
        uint32_t ready = 2 + (next & 1);
        rec(f, EVL_PROBE_ID_poll_exit, 0, ready, 0, NULL);
        for (uint32_t i = 0; i < ready; i++)
            rec(f, EVL_PROBE_ID_task_wake, 1 + (next + i) % NTASKS, EVL_WAKER_IO, 0, NULL);
        for (uint32_t i = 0; i < ready; i++) {
            uint64_t t = 1 + (next + i) % NTASKS;
            rec(f, EVL_PROBE_ID_task_run, t, 0, 0, NULL);
            f->now += STEP_NS;
            rec(f, EVL_PROBE_ID_task_suspend, t, EVL_SUSPEND_IO, t + 7, NULL);
        }
        next += ready;
    }
    flush(f);
    uint64_t t1 = bench_cpu_ns();
    r->end_ns = (int64_t)f->now;
    BENCH_CHECK_EQ(ls_output_finish(r, "benchmark"), 0);
    uint64_t t2 = bench_cpu_ns();
    BENCH_CHECK_EQ(r->rejected, 0);
    BENCH_CHECK_EQ(r->records, f->events);
    *ingest_ns = (double)(t1 - t0) / (double)f->events;
    *end_ns = (double)(t2 - t1) / (double)f->events;
    ls_syms_free(r->syms);
    ls_blocks_free(r);
    free(r->loops);
    free(r);
    free(f);
    unlink(path);
}

int main(int argc, char **argv)
{
    bench_opts o;
    bench_parse(&o, argc, argv);
    long n = bench_count(&o, 2000, 200) * 1000;
    bench_series in = {.bench = "ingest", .impl = "recorder", .unit = "ns/event"};
    bench_series end = {.bench = "ingest-end", .impl = "recorder", .unit = "ns/event"};
    for (int i = 0; i < o.repeats; i++) {
        double a, b;
        run(n, &a, &b);
        bench_add(&in, a);
        bench_add(&end, b);
    }
    bench_print(&in);
    bench_print(&end);
    return 0;
}
