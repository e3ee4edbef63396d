/*
 * decode.h -- the third stage of the recorder's pipeline: a decoder per
 * recording mode turns the ring buffer's messages (record.h) into model
 * records for the sinks (sink.h).  The common dispatch (ingest.c) makes
 * each loop's entry, ends a loop at LS_MSG_LOOP_STOP and hands blocking
 * episodes to blocks.c; everything that differs between modes is one of
 * these functions, in the mode's own file: decode_evl.c (libevl's probes:
 * batches of lifecycle records) and decode_generic.c (any epoll loop:
 * iteration windows, the asyncio task of an episode).  A mode also says
 * which BPF programs load and how they attach (the source's part, with
 * attach.c's helpers) and what its meta rows are.  Adding a decoder:
 * ARCHITECTURE.md, "The recorder's pipeline".
 */
#ifndef LOOPSCOPE_DECODE_H
#define LOOPSCOPE_DECODE_H

#include "record.h"
#include "symbols.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct recorder;
struct ls_loop_info;
struct ls_pystack;

typedef struct ls_decoder {
    const char *name;         /* "libevl mode", "generic loop mode" */
    bool tasks;               /* it records each task's lifecycle (the flight
                               * recorder keeps a task map, watches steps) */
    /* Before loading: the BPF side's configuration and which programs
     * load; after loading: attaching them (0, or non-zero after one error
     * line).  started: the programs run and the trace is open. */
    void (*configure)(struct recorder *r);
    int (*attach)(struct recorder *r);
    void (*started)(struct recorder *r);
    /* What the target runs on (r->runtime); running: it runs its program
     * (not a command we started that has not exec'd yet). */
    void (*runtime)(struct recorder *r, bool running);
    /* From the main loop, at least every tick_ms (0: never). */
    void (*tick)(struct recorder *r, int64_t now);
    int (*tick_ms)(const struct recorder *r);
    /* Before detaching: what the target still holds is asked for. */
    void (*detaching)(struct recorder *r);
    /* A loop appears (its first message; r->nloops: those before it). */
    void (*loop_new)(struct recorder *r);
    /* A message of loop li: LS_MSG_LOOP_START, _LOOP_STOP (after the
     * common end of the loop), _BATCH, _REC, _WINDOW. */
    void (*msg)(struct recorder *r, struct ls_loop_info *li, const struct ls_msg_hdr *h);
    /* The task a blocking episode ran in (0: none known) and its name
     * for the sinks (NULL: none), making sure the task has a row. */
    uint64_t (*block_task)(struct recorder *r, const struct ls_msg_hdr *h,
                           const struct ls_pystack *py, const char **name);
    /* An episode still open in BPF at the end: when it ended (end, or
     * earlier if the mode knows better). */
    int64_t (*open_end)(struct recorder *r, uint32_t tid, const struct ls_block *b, int64_t end);
    /* At the end, after the open episodes: what is still summed in BPF. */
    void (*flush)(struct recorder *r);
    /* Meta rows of this mode, at the start and at the end. */
    void (*meta_start)(struct recorder *r);
    void (*meta_end)(struct recorder *r);
    /* Application code (not the runtime, not a system library): the frame
     * `loopscope blocking` and `top` call an episode's site. */
    bool (*app_frame)(const struct recorder *r, const ls_sym *f);
    /* The status line's and the summary's part: what was recorded. */
    void (*status)(struct recorder *r, FILE *out, double elapsed_s, double dt_s);
    void (*summary)(struct recorder *r, FILE *out);
} ls_decoder;

extern const ls_decoder ls_decoder_evl, ls_decoder_generic;

static inline bool ls_has_prefix(const char *s, const char *p)
{
    return s && !strncmp(s, p, strlen(p));
}

/* The system's libraries (and anonymous or special mappings): never
 * application code. */
static inline bool ls_system_module(const char *m)
{
    return ls_has_prefix(m, "/usr/lib/") || ls_has_prefix(m, "/lib/") || m[0] == '[';
}

#endif /* LOOPSCOPE_DECODE_H */
