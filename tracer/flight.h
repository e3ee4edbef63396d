/*
 * flight.h -- `loopscope record --flight-recorder WINDOW`: the last WINDOW
 * of the ring buffer's messages kept in memory, and a complete trace
 * written each time a trigger fires (a long blocking episode, a leak
 * verdict, SIGUSR1).  A hold stage (hold.h: ls_flight_open sets it up,
 * then the engine drives it through its table); what else the recorder
 * asks of it is below.  Design, bounds and rules: tracer/README.md,
 * "Flight recorder".  Part of the recorder (recorder.h); all on its one
 * thread.
 */
#ifndef LOOPSCOPE_FLIGHT_H
#define LOOPSCOPE_FLIGHT_H

#include "recorder.h"

#include <stddef.h>
#include <stdint.h>

/* The ring and the task map keep messages this much longer than the
 * window (a batch may carry records older than its message). */
#define LS_FLIGHT_SLACK_NS 1000000000ll
/* A file is written this long after its tail ends: the batches carrying
 * the tail's last records (a loop hands them over within
 * EVL_TRACE_FLUSH_NS) have arrived by then. */
#define LS_FLIGHT_GRACE_NS 50000000ll
#define LS_FLIGHT_MIN_MEMORY (8ull << 20)

/* The files' names: STEM-N EXT. */
const char *ls_flight_stem(recorder *r);
const char *ls_flight_ext(recorder *r);
/* The status line's part. */
void ls_flight_status(recorder *r, char *buf, size_t len);
/* A flight trace's counters (meta): the kernel's counter k counted over
 * the window that starts at from (the recorder's since then). */
uint64_t ls_flight_stat(recorder *parent, enum ls_stat k, int64_t from);

#endif /* LOOPSCOPE_FLIGHT_H */
