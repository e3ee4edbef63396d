/*
 * executor.c -- run blocking functions off the loop (run_in_executor).
 *
 * A small pool of threads, started lazily up to executor_threads.  A worker
 * that finishes a job posts the job's handle to the loop (evl__post: a
 * mutex-guarded queue plus the loop's eventfd), exactly like asyncio's
 * call_soon_threadsafe(_copy_state): in the next run phase the handle
 * completes the job's future on the loop thread, and the awaiting task
 * resumes one iteration later.  Workers never touch futures.
 */
#define _GNU_SOURCE
#include "evl-internal.h"

#include <errno.h>
#include <stdlib.h>

typedef struct evl__job {
    evl_future fut;           /* first: the job is its future */
    evl__handle done;         /* posted to the loop when fn returned */
    struct evl__job *next;    /* executor's pending queue */
    evl_work_fn fn;
    void *arg;
    intptr_t result;
    atomic_int cancelled;     /* set on the loop thread, read by workers */
} evl__job;

struct evl__executor {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    evl__job *head, *tail;    /* not yet started */
    pthread_t *threads;
    unsigned nthreads, idle, max;
    int shutdown;
    evl_loop *loop;
};

static void *evl__worker(void *p)
{
    evl__executor *x = p;
    pthread_mutex_lock(&x->lock);
    for (;;) {
        while (!x->head && !x->shutdown) {
            x->idle++;
            pthread_cond_wait(&x->cond, &x->lock);
            x->idle--;
        }
        if (!x->head)
            break;
        evl__job *j = x->head;
        x->head = j->next;
        if (!x->head)
            x->tail = NULL;
        pthread_mutex_unlock(&x->lock);
        /* A future cancelled before its job started skips it, like
         * concurrent.futures.Future.cancel. */
        if (!atomic_load(&j->cancelled))
            j->result = j->fn(j->arg);
        evl__post(x->loop, &j->done);
        pthread_mutex_lock(&x->lock);
    }
    pthread_mutex_unlock(&x->lock);
    return NULL;
}

static void evl__job_done_run(evl__handle *h)
{
    evl__job *j = evl__container_of(h, evl__job, done);
    evl_loop *loop = j->fut.loop;
    loop->exec_inflight--;
    if (j->fut.state == EVL_FUTURE_PENDING)
        evl__future_complete(&j->fut, EVL_FUTURE_DONE, j->result);
    evl_future_unref(&j->fut);        /* the job's own reference */
}

void evl__job_free(evl_future *f)
{
    free((evl__job *)(void *)f);
}

void evl__job_cancel(evl_future *f)
{
    atomic_store(&((evl__job *)(void *)f)->cancelled, 1);
}

static evl__executor *evl__executor_get(evl_loop *loop)
{
    if (loop->exec)
        return loop->exec;
    evl__executor *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->threads = calloc(loop->executor_threads, sizeof(pthread_t));
    if (!x->threads) {
        free(x);
        return NULL;
    }
    pthread_mutex_init(&x->lock, NULL);
    pthread_cond_init(&x->cond, NULL);
    x->max = loop->executor_threads;
    x->loop = loop;
    loop->exec = x;
    return x;
}

evl_future *evl_executor_submit(evl_loop *loop, evl_work_fn fn, void *arg)
{
    if (!loop)
        loop = evl__tls_loop;
    if (!loop || !fn || loop->closing)
        return NULL;
    evl__executor *x = evl__executor_get(loop);
    evl__job *j = x ? malloc(sizeof(*j)) : NULL;
    if (!j)
        return NULL;
    evl__future_init(&j->fut, loop, EVL__FUT_EXEC, EVL_WAKER_EXECUTOR);
    j->fut.refs = 2;                  /* the caller's and the job's */
    j->done.next = j->done.prev = NULL;
    j->done.run = evl__job_done_run;
    j->next = NULL;
    j->fn = fn;
    j->arg = arg;
    j->result = EVL_ECANCELED;
    atomic_init(&j->cancelled, 0);
    pthread_mutex_lock(&x->lock);
    if (x->tail)
        x->tail->next = j;
    else
        x->head = j;
    x->tail = j;
    int rc = 0;
    if (x->idle == 0 && x->nthreads < x->max) {
        rc = pthread_create(&x->threads[x->nthreads], NULL, evl__worker, x);
        if (rc == 0)
            x->nthreads++;
    }
    if (rc != 0 && x->nthreads == 0) {   /* no thread could run it */
        x->head = x->tail = NULL;
        pthread_mutex_unlock(&x->lock);
        free(j);
        errno = rc;
        return NULL;
    }
    pthread_cond_signal(&x->cond);
    pthread_mutex_unlock(&x->lock);
    loop->exec_inflight++;
    return &j->fut;
}

intptr_t evl_run_in_executor(evl_work_fn fn, void *arg)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    evl_future *f = evl_executor_submit(t->fut.loop, fn, arg);
    if (!f)
        return EVL_ENOMEM;
    intptr_t r = evl_await(f);
    evl_future_unref(f);
    return r;
}

/* evl_loop_free: stop the workers (letting queued jobs finish: their
 * threads may be mid-call) and drop the jobs' references. */
void evl__executor_release(evl_loop *loop)
{
    evl__executor *x = loop->exec;
    if (!x)
        return;
    pthread_mutex_lock(&x->lock);
    x->shutdown = 1;
    for (evl__job *j = x->head; j; j = j->next)
        atomic_store(&j->cancelled, 1);   /* not started: skip them */
    pthread_cond_broadcast(&x->cond);
    pthread_mutex_unlock(&x->lock);
    for (unsigned i = 0; i < x->nthreads; i++)
        pthread_join(x->threads[i], NULL);
    /* Every job is now posted; complete none, drop them all. */
    evl__drain_posted(loop);
    evl__queue keep;
    evl__queue_init(&keep);
    evl__handle *h;
    while ((h = evl__queue_pop(&loop->ready))) {
        if (h->run == evl__job_done_run) {
            evl__job *j = evl__container_of(h, evl__job, done);
            loop->exec_inflight--;
            evl_future_unref(&j->fut);
        } else {
            evl__queue_push(&keep, h);
        }
    }
    while ((h = evl__queue_pop(&keep)))
        evl__queue_push(&loop->ready, h);
    pthread_cond_destroy(&x->cond);
    pthread_mutex_destroy(&x->lock);
    free(x->threads);
    free(x);
    loop->exec = NULL;
}
