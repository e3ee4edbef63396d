/*
 * flight_int.h -- private to the flight recorder's two files: flight.c
 * (the capture: the ring of messages, the live-task map, the triggers)
 * and flight_write.c (a trace written per trigger).  Design, bounds and
 * rules: tracer/README.md, "Flight recorder".
 */
#ifndef LOOPSCOPE_FLIGHT_INT_H
#define LOOPSCOPE_FLIGHT_INT_H

#include "flight.h"

#include <limits.h>

#define LS_CHUNK_BYTES (1u << 20)
#define LS_MSG_FLIGHT_STATS 1000      /* ours, never from BPF: the kernel's counters */
#define LS_STATS_EVERY_NS 500000000ll
#define LS_SWEEP_EVERY_NS 250000000ll
#define LS_FREC_MAX (sizeof(struct evl_rec) + 48)   /* a create record, name cut at 47 */


/* One message in the ring, followed by its bytes (padded to 8). */
struct ls_fent {
    int64_t arrival;          /* CLOCK_MONOTONIC when the recorder took it */
    uint32_t size;
    uint32_t pad;
};

struct ls_fchunk {
    struct ls_fchunk *next;
    size_t head, used;        /* live entries are in [head, used) */
    uint8_t data[];
};
#define LS_CHUNK_DATA (LS_CHUNK_BYTES - offsetof(struct ls_fchunk, data))

/* A task the target created (or listed in a snapshot): its create record. */
struct ls_ftask {
    uint64_t loop, id;        /* id 0: a free slot (loop 1: a deleted one) */
    int64_t created, finished;/* finished 0: alive */
    uint32_t len;             /* bytes of rec */
    uint8_t rec[LS_FREC_MAX];
};

struct ls_flight {
    struct ls_fchunk *first, *last;
    size_t nchunks;
    uint64_t nmsgs;
    int64_t evicted_until;    /* arrival of the newest message evicted, 0 */
    uint64_t evicted_early;   /* messages the memory cap evicted inside the window */
    uint64_t too_big;
    struct ls_ftask *tasks;
    size_t tcap, ntasks, ndeleted;
    uint64_t untracked_tasks; /* created while the map was at its cap */
    int64_t last_stats, last_sweep;
    /* the capture under way */
    bool pending;
    int64_t trig_ns, detect_ns, end_ns;
    unsigned ntrig;           /* triggers in it (the first and those in its tail) */
    char detail[320];         /* what fired: pre, the task's label, post */
    char pre[128], post[64];
    uint64_t trig_loop, trig_task;
    bool trig_named;          /* a task is named: labelled again when written (its
                               * create may arrive after the trigger) */
    /* files */
    char stem[PATH_MAX], ext[64];
    unsigned next_index;
    unsigned written, failed;
    uint64_t triggers;
};


/* flight.c: a task's entry in the map (NULL: none); its label for a
 * trigger line; call fn on each message in the ring, oldest first. */
struct ls_ftask *ls_flight_task(struct ls_flight *f, uint64_t loop, uint64_t id);
void ls_flight_task_label(recorder *r, uint64_t loop, uint64_t task, char *buf, size_t len);
void ls_flight_ring_each(struct ls_flight *f, void (*fn)(void *ctx, const struct ls_fent *e),
                         void *ctx);
/* flight_write.c: write the capture under way: [trigger - window, end of
 * its tail] (up to now when cut short). */
void ls_flight_write(recorder *r, int64_t now, bool cut);

#endif /* LOOPSCOPE_FLIGHT_INT_H */
