/*
 * tasks.h -- the recorder's table of live tasks: per-task time accounting
 * as events stream in (task_stats), with memory bounded whatever task ids
 * the target invents.  A task leaves the table as soon as its finish is
 * seen and its task_stats row written; at most LS_TASKS_MAX are tracked at
 * once (tracer/README.md states the ceiling), further ones are counted and
 * get no task_stats row.
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
    int64_t last_ts;          /* time of its last lifecycle event */
    int32_t last_kind;        /* that event's probe id; LS_TASK_PREEXISTING */
    uint32_t row;             /* enum ls_task_row: what its tasks row holds */
    int64_t busy, sched, idle, longest;
    uint64_t resumes, wakes;
} ls_task;

enum ls_task_row {
    LS_ROW_NONE = 0,
    LS_ROW_PLACEHOLDER = 1,   /* seen before its creation: name '?' */
    LS_ROW_CREATED = 2,       /* its task_create (or snapshot) is stored */
};

/* last_kind of a task that existed before the recording: until its first
 * event we do not know what it was doing; that event tells (woken: it was
 * suspended; run: it was ready). */
#define LS_TASK_PREEXISTING (-1)

typedef struct ls_tasks ls_tasks;

ls_tasks *ls_tasks_new(size_t max_live);
void ls_tasks_free(ls_tasks *t);
/* The entry of task id (made, zeroed, if new: *made set).  NULL when the
 * table holds max_live tasks already (or out of memory). */
ls_task *ls_tasks_get(ls_tasks *t, uint64_t id, uint64_t loop, bool *made);
ls_task *ls_tasks_find(ls_tasks *t, uint64_t id);
/* Forget a task (its entry pointer, and any other, is invalid afterwards). */
void ls_tasks_remove(ls_tasks *t, ls_task *task);
size_t ls_tasks_live(const ls_tasks *t);
/* Call fn on every live task. */
void ls_tasks_each(ls_tasks *t, void (*fn)(ls_task *, void *), void *arg);

/* Account the span the task was in (its last event's kind) up to ts; kind
 * is the event that ends it (0: the end of the recording). */
void ls_task_close_span(ls_task *task, int64_t ts, int kind);

#endif
