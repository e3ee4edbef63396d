/*
 * ps.h -- `loopscope ps` (cmd_ps.c): the runtime-neutral snapshot a source
 * fills and the printers read, and the sources.  A source reads one
 * snapshot of a process's tasks: cmd_ps.c's CPython asyncio source
 * (pytasks.h's census) and ps_evl.c's libevl source (evl_debug, the
 * loops' pending tasks).  Part of the tracer; depends on evl-probes.h.
 */
#ifndef LOOPSCOPE_PS_H
#define LOOPSCOPE_PS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct ps_frame {
    char *function, *file;          /* the target's strings (UTF-8) */
    int line;
    bool runtime;                   /* the runtime's own (asyncio, libevl, libc), not the application's */
};

struct ps_task {
    uint64_t id;                    /* the task: a Task object's address, a libevl task id */
    char *name;
    int state;                      /* 1..6: ready running waiting finished failed cancelled */
    int reason;                     /* waiting: an EVL_SUSPEND_*, else 0 */
    uint64_t object;                /* what it waits on (reason task: the awaited task's id) */
    char awaits[48];                /* the innermost awaitable's type */
    uint32_t nheld;
    uint64_t held[4];               /* locks, semaphores, conditions it holds */
    int cancels;
    bool unretrieved, chain_cut;
    size_t nframes;                 /* async stack, outermost first */
    struct ps_frame *frames;
};

enum { PS_TRUNCATED = 1, PS_READ_ERROR = 2 };

struct ps_snap {
    pid_t pid;
    char runtime[64];               /* "CPython 3.11.7", "libevl" */
    const char *version_key;        /* the JSON key of the version: "python", "libevl" */
    char version[64];               /* "3.11.7" */
    size_t n;
    struct ps_task *t;
    int64_t dur_ns;
    uint32_t flags;                 /* PS_* */
};

/* What a source says of a process. */
enum { PS_MINE = 0, PS_NOT_MINE = 1, PS_FAILED = 2 };

/* PS_MINE: *s filled.  PS_NOT_MINE: not this runtime, why says what it is
 * not (another source may take it).  PS_FAILED: this runtime, but no
 * snapshot: the error line is printed. */
typedef int ps_source_fn(pid_t pid, struct ps_snap *s, char *why, size_t whylen);
ps_source_fn ps_libevl;             /* ps_evl.c */

/* cmd_ps.c: one error line "loopscope ps: ..." (PS_FAILED); a copy of s
 * ("?" for NULL; exits when out of memory); a snapshot's memory. */
int ps_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *ps_strdup(const char *s);
void ps_snap_free(struct ps_snap *s);

#endif
