/*
 * store.h -- the trace database writer used by `loopscope record`.
 * Schema: tracer/schema.sql, documented in tracer/SCHEMA.md.
 */
#ifndef LOOPSCOPE_STORE_H
#define LOOPSCOPE_STORE_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>


struct ls_sym;

typedef struct ls_store ls_store;

/* Every writer below accepts a NULL store and does nothing: a recorder
 * that keeps no trace (`loopscope top` without -o) runs the same paths. */

/* Create the trace at path.  Refuses an existing file unless force; with
 * force, the old file is replaced only when the new trace is finished
 * (written beside it, renamed over it), so it is never corrupted.  On error
 * returns NULL and writes one line (no "error: " prefix) into err. */
ls_store *ls_store_create(const char *path, bool force, char *err, size_t errlen);
/* The checks of ls_store_create without creating anything (run before
 * attaching, so a bad output never disturbs the target): 0 or -1 with err. */
int ls_store_check(const char *path, bool force, char *err, size_t errlen);
/* Give up a trace before anything was recorded: close and delete it (an
 * earlier trace it was to replace stays untouched). */
void ls_store_abort(ls_store *s);

void ls_store_meta(ls_store *s, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void ls_store_event(ls_store *s, int64_t ts, uint64_t loop, uint64_t task, int kind,
                    int64_t reason, int64_t arg0, int64_t arg1);
void ls_store_loop(ls_store *s, uint64_t loop, uint32_t pid, uint32_t tid, int64_t started);
void ls_store_loop_stop(ls_store *s, uint64_t loop, int64_t stopped);
struct ls_sink_proc;
/* A process group's member (processes row id p->id, replaced as it changes). */
void ls_store_process(ls_store *s, const struct ls_sink_proc *p);
/* name: name_len bytes, any bytes (stored as valid UTF-8). */
void ls_store_task_create(ls_store *s, uint64_t task, uint64_t loop, uint64_t parent,
                          const char *name, size_t name_len, const char *function,
                          uint64_t fn_addr, int64_t created, bool preexisting);
/* A row for a task seen without its creation (name '?', preexisting),
 * unless it has one: events never name a task missing from tasks. */
void ls_store_task_unknown(ls_store *s, uint64_t task, uint64_t loop);
void ls_store_task_leak(ls_store *s, uint64_t task, int kind);
/* Generic mode: a task known only by its name (an asyncio Task), unless
 * it has a row. */
void ls_store_task_named(ls_store *s, uint64_t task, uint64_t loop, const char *name,
                         size_t name_len);
/* Generic mode: a window of a loop thread's iterations, and (at the end)
 * a bucket of its iteration-latency histogram. */
void ls_store_window(ls_store *s, uint64_t loop, int64_t start, int64_t end, uint64_t iterations,
                     uint64_t wait_ns, uint64_t busy_ns, uint64_t max_busy_ns);
void ls_store_hist(ls_store *s, uint64_t loop, int64_t lo, int64_t hi, uint64_t count,
                   uint64_t busy_ns);
void ls_store_task_finish(ls_store *s, uint64_t task, uint64_t loop, int64_t ended, int state,
                          int64_t error);

/* A symbolized stack: its frames (depth 0 = innermost) one at a time,
 * each right after its lookup (symbols are valid only until the next
 * lookup), then the stack row with the depth. */
void ls_store_frame(ls_store *s, int64_t stack_id, int depth, uint64_t pc,
                    const struct ls_sym *sym);
void ls_store_stack(ls_store *s, int64_t id, int depth);
/* An asyncio task's await chain (stack, stored before) when it parked at ts. */
void ls_store_await_stack(ls_store *s, uint64_t task, int64_t ts, int64_t stack);
/* A blocking episode; on-CPU ones get their duration at ls_store_finish. */
void ls_store_blocking(ls_store *s, uint64_t loop, uint64_t task, int64_t start, int64_t dur,
                       int kind, int64_t syscall, int64_t stack_id);

void ls_store_syscall_stat(ls_store *s, uint64_t loop, uint32_t tid, uint32_t nr, uint64_t count,
                           uint64_t total_ns, uint64_t max_ns);

/* Commit if the open transaction is older than the commit interval. */
int ls_store_tick(ls_store *s, int64_t now_ns);
/* Build the indexes, commit, checkpoint, close (and rename when forced).
 * Returns 0 or -1 with err filled. */
int ls_store_finish(ls_store *s, char *err, size_t errlen);
/* The database, for model/derive.c's writers (same transaction). */
struct sqlite3 *ls_store_db(ls_store *s);
/* Write the rows still batched in memory. */
void ls_store_flush(ls_store *s);
const char *ls_store_error(const ls_store *s);
/* Bytes on disk now: the database file and its WAL (--max-size). */
uint64_t ls_store_size(const ls_store *s);

#endif
