/*
 * hold.h -- the second stage of the recorder's pipeline: messages held
 * between the source (the ring buffer, read by ingest.c's ls_on_msg) and
 * the decoders.  At most one hold stage runs (r->hold, NULL: none, every
 * message goes on at once): the backlog (backlog.c: stored later, when
 * the CPUs have time to spare) or the flight recorder (flight.c: the last
 * WINDOW kept in memory, a trace written per trigger by flight_write.c).
 * Each keeps its state private; the engine drives it through this table.
 */
#ifndef LOOPSCOPE_HOLD_H
#define LOOPSCOPE_HOLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct recorder;

typedef struct ls_hold_ops {
    const char *name;
    /* A message the source took (ref: a kept batch still in the target,
     * LS_MSG_BATCH_REF): true if the stage took it (held, to go on later
     * through ls_take_msg, or kept for its own writer), false if it goes
     * on now. */
    bool (*take)(struct recorder *r, const void *data, size_t size, bool ref);
    /* One turn of the main loop (now; a drain's budget; SIGUSR1 seen):
     * what is due goes on; true if more is due at once. */
    bool (*tick)(struct recorder *r, int64_t now, int64_t slice_ns, bool usr1);
    /* It holds messages back and has room: the main loop may read the
     * ring on its slow timer. */
    bool (*holding)(struct recorder *r);
    /* Bytes it holds now (the status line). */
    uint64_t (*bytes)(struct recorder *r);
    /* Detached and the ring drained: what it holds goes on (before the
     * recorder leaves the target's loops); then the end of recording
     * (why: its reason), after leaving them. */
    void (*drain)(struct recorder *r);
    void (*close)(struct recorder *r, const char *why);
    /* Its meta rows at the start and the end of a trace. */
    void (*meta_start)(struct recorder *r);
    void (*meta_end)(struct recorder *r);
    void (*free)(struct recorder *r);
} ls_hold_ops;

/* Set up the stage (before attaching): r->hold and its state, 0 or
 * non-zero after one error line.  backlog.c: with r->backlog_limit set;
 * flight.c: with --flight-recorder. */
int ls_backlog_open(struct recorder *r);
int ls_flight_open(struct recorder *r);

#endif /* LOOPSCOPE_HOLD_H */
