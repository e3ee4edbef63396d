/*
 * taskgroup.c -- asyncio.TaskGroup, a transcription of CPython 3.11's
 * asyncio/taskgroups.py (loop/ORDERING.md rule 15).
 *
 * Each child carries a done-callback (_on_task_done, an evl__cb scheduled
 * with call_soon when the child ends).  The first child that fails aborts
 * the group (cancels the other children) and cancels the parent task,
 * remembering that it did (parent_cancel_requested) so that exit can
 * withdraw the request with uncancel.  Exit waits on a future that the last
 * _on_task_done completes (_on_completed_fut), suspending with reason
 * EVL_SUSPEND_TASKGROUP; it wakes with EVL_WAKER_TASKGROUP.
 *
 * The group is on the heap and counts references: the program's and one
 * per child whose callback has not run, so a group freed with children
 * still running lives until they are done.
 */
#include "evl-internal.h"

#include <stdlib.h>

typedef struct evl__tg_node {
    evl__cb cb;               /* _on_task_done on the child */
    evl_taskgroup *g;
    evl_future *task;         /* a reference (self._tasks holds the task) */
    struct evl__tg_node *prev, *next;
} evl__tg_node;

struct evl_taskgroup {
    evl_loop *loop;
    evl__task *parent;        /* a reference */
    evl__tg_node *head, *tail; /* self._tasks, in spawn order */
    size_t ntasks;
    evl__owned_fut done_fut;  /* _on_completed_fut while waiting is set */
    size_t nerrors;
    int errors[EVL_TASKGROUP_ERRORS];
    uint32_t refs;
    uint8_t waiting;          /* _on_completed_fut is not None */
    uint8_t exiting;
    uint8_t aborting;
    uint8_t parent_cancel_requested;
};

static void evl__tg_unref(evl_taskgroup *g)
{
    if (--g->refs)
        return;
    evl_future_unref(&g->parent->fut);
    free(g);
}

static void evl__tg_add_error(evl_taskgroup *g, int err)
{
    if (g->nerrors < EVL_TASKGROUP_ERRORS)
        g->errors[g->nerrors] = err;
    g->nerrors++;
}

/* TaskGroup._abort: cancel every child not done yet, in spawn order. */
static void evl__tg_abort(evl_taskgroup *g)
{
    g->aborting = 1;
    for (evl__tg_node *n = g->head; n; n = n->next)
        if (n->task->state == EVL_FUTURE_PENDING)
            evl_cancel(n->task);
}

/* TaskGroup._on_task_done. */
static void evl__tg_on_task_done(evl__cb *c, evl_future *task)
{
    evl__tg_node *n = evl__container_of(c, evl__tg_node, cb);
    evl_taskgroup *g = n->g;
    /* self._tasks.discard(task) */
    if (n->prev)
        n->prev->next = n->next;
    else
        g->head = n->next;
    if (n->next)
        n->next->prev = n->prev;
    else
        g->tail = n->prev;
    g->ntasks--;
    if (g->waiting && !g->ntasks && g->done_fut.fut.state == EVL_FUTURE_PENDING)
        evl__future_complete(&g->done_fut.fut, EVL_FUTURE_DONE, 0);
    if (task->state != EVL_FUTURE_CANCELLED && task->result < 0) {
        task->retrieved = 1;          /* task.exception() */
        evl__tg_add_error(g, (int)task->result);
        evl__task *p = g->parent;
        if (p->fut.state != EVL_FUTURE_PENDING) {
            /* asyncio calls the loop's exception handler here. */
            if (evl__debug(g->loop) && !g->loop->closing)
                evl__warn(g->loop, "task group child failed (%s) after its parent '%s' ended",
                          evl_err_name((int)task->result), p->name);
        } else if (!g->aborting && !g->parent_cancel_requested) {
            evl__tg_abort(g);
            g->parent_cancel_requested = 1;
            evl__task_cancel(p);
        }
    }
    evl_future_unref(task);           /* a hold keeps it until we return */
    free(n);
    evl__tg_unref(g);
}

/* evl_loop_free destroyed the parent inside exit: it will never free the
 * group, so its reference goes now (the children's follow as they end). */
static void evl__tg_abandon(evl__owned_fut *f)
{
    evl_taskgroup *g = evl__container_of(f, evl_taskgroup, done_fut);
    g->waiting = 0;
    evl__tg_unref(g);
}

evl_taskgroup *evl_taskgroup_new(void)
{
    evl__task *t = evl__current_task();
    if (!t) {
        errno = EPERM;
        return NULL;
    }
    evl_taskgroup *g = malloc(sizeof(*g));
    if (!g) {
        errno = ENOMEM;
        return NULL;
    }
    g->loop = t->fut.loop;
    g->parent = evl__task_of(evl_future_ref(&t->fut));
    g->head = g->tail = NULL;
    g->ntasks = 0;
    evl__owned_fut_init(&g->done_fut, g->loop, EVL_WAKER_TASKGROUP, evl__tg_abandon);
    g->nerrors = 0;
    g->refs = 1;
    g->waiting = g->exiting = g->aborting = g->parent_cancel_requested = 0;
    return g;
}

evl_task *evl_taskgroup_spawn(evl_taskgroup *g, const char *name, evl_task_fn fn, void *arg)
{
    if (!g || (g->exiting && !g->ntasks)) {
        errno = EINVAL;               /* "TaskGroup is finished" */
        return NULL;
    }
    if (g->aborting) {
        errno = ECANCELED;            /* "TaskGroup is shutting down" */
        return NULL;
    }
    if (g->loop->closing) {
        errno = EINVAL;
        return NULL;
    }
    evl__tg_node *n = malloc(sizeof(*n));
    if (!n) {
        errno = ENOMEM;
        return NULL;
    }
    evl_task *task = evl_spawn(g->loop, name, fn, arg);
    if (!task) {
        free(n);
        return NULL;
    }
    n->g = g;
    n->task = evl_future_ref(task);
    n->next = NULL;
    n->prev = g->tail;
    if (g->tail)
        g->tail->next = n;
    else
        g->head = n;
    g->tail = n;
    g->ntasks++;
    g->refs++;
    evl__cb_add(task, &n->cb, evl__tg_on_task_done);
    return task;
}

/* TaskGroup.__aexit__ (without SystemExit / KeyboardInterrupt, which C has
 * no equivalent of). */
intptr_t evl_taskgroup_exit(evl_taskgroup *g, intptr_t body)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    if (!g || g->parent != t || g->exiting)
        return EVL_EINVAL;
    g->exiting = 1;
    bool propagate_cancel = body == EVL_ECANCELED;
    if (g->parent_cancel_requested) {
        /* If this flag is set we *must* call uncancel(). */
        if (evl_task_uncancel(&t->fut) == 0)
            propagate_cancel = false;
    }
    if (body < 0 && !g->aborting)
        evl__tg_abort(g);             /* the parent is cancelled, or the body failed */
    while (g->ntasks) {
        evl__owned_fut_init(&g->done_fut, g->loop, EVL_WAKER_TASKGROUP, evl__tg_abandon);
        g->waiting = 1;
        intptr_t r = evl__task_wait(t, &g->done_fut.fut, EVL_SUSPEND_TASKGROUP, (uintptr_t)g, 0);
        g->waiting = 0;
        if (r == EVL_ECANCELED && !g->aborting) {
            /* The parent is cancelled while its children still run. */
            propagate_cancel = true;
            evl__tg_abort(g);
        }
    }
    /* CancelledError goes on unless there are errors: those win. */
    if (propagate_cancel && !g->nerrors)
        return EVL_ECANCELED;
    if (body < 0 && body != EVL_ECANCELED)
        evl__tg_add_error(g, (int)body);
    if (g->nerrors)
        return EVL_EGROUP;            /* the ExceptionGroup: evl_taskgroup_errors */
    return body < 0 ? body : 0;       /* __aexit__ returned None */
}

size_t evl_taskgroup_errors(const evl_taskgroup *g, int *errs, size_t n)
{
    if (!g)
        return 0;
    size_t kept = g->nerrors < EVL_TASKGROUP_ERRORS ? g->nerrors : EVL_TASKGROUP_ERRORS;
    for (size_t i = 0; i < n && i < kept; i++)
        errs[i] = g->errors[i];
    return g->nerrors;
}

void evl_taskgroup_free(evl_taskgroup *g)
{
    if (g)
        evl__tg_unref(g);
}
