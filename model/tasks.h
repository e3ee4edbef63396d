/*
 * tasks.h -- the replay's table of live tasks (model/replay.h): per-task
 * state and time accounting as events stream in, with memory bounded
 * whatever task ids the target invents: open addressing with backward-shift
 * deletion, so the table stays as small as the live set.  A task leaves it
 * once its finish is replayed (a failed one at its leak verdict or the end);
 * at most max_live are tracked at once (LS_TASKS_MAX for the recorder,
 * tracer/README.md states the ceiling), further ones are counted and get no
 * task_stats row.
 */
#ifndef LOOPSCOPE_TASKS_H
#define LOOPSCOPE_TASKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LS_TASKS_MAX (1u << 18)     /* live tasks tracked at once */

typedef struct ls_task {
    uint64_t id;              /* task id; 0 = free slot (0 is never a task) */
    uint64_t loop;
    /* The span it is in (model/replay.h): state is EVL_STATE_* or
     * LS_TASK_NO_STATE before its first event; a pre-existing task's first
     * span has node LS_NODE_PREEXISTING and its state is decided by the
     * event that ends it. */
    int64_t since;
    int8_t state;
    uint8_t done;             /* finished (kept only until a leak verdict) */
    uint8_t seen;             /* has been in a state (a span opened) */
    int16_t node;
    int16_t tnode;            /* the last lifecycle node, leaks included */
    int64_t tsince;           /* when it entered tnode */
    int64_t detail, object, timeout;
    /* Its longest slice so far: a task_run to its next suspend or finish
     * (the time between two yields; task_slices). */
    int64_t slice_start, slice_longest, slice_at;
    uint8_t in_slice, has_slice;
    /* Its statistics so far (task_stats). */
    int64_t busy, sched, idle, longest;
    uint64_t resumes, wakes;
    uint32_t user;            /* the caller's own field (the recorder's row state) */
} ls_task;

#define LS_TASK_NO_STATE (-1)

typedef struct ls_tasks ls_tasks;

ls_tasks *ls_tasks_new(size_t max_live);
void ls_tasks_free(ls_tasks *t);
/* The entry of task id (made, zeroed, if new: *made set).  NULL when the
 * table holds max_live tasks already (or out of memory). */
ls_task *ls_tasks_get(ls_tasks *t, uint64_t id, uint64_t loop, bool *made);
ls_task *ls_tasks_find(ls_tasks *t, uint64_t id);
/* Forget a task (its entry pointer, and any other, is invalid afterwards). */
void ls_tasks_remove(ls_tasks *t, ls_task *task);
/* Call fn on every live task. */
void ls_tasks_each(ls_tasks *t, void (*fn)(ls_task *, void *), void *arg);

#endif
