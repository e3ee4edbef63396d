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
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

typedef struct evl__job {
    evl_future fut;           /* first: the job is its future */
    evl__handle done;         /* posted to the loop when fn returned */
    struct evl__job *next;    /* executor's pending queue */
    evl_work_fn fn;
    void *arg;
    intptr_t result;
    atomic_int cancelled;     /* set on the loop thread, read by workers */
    /* Called on the loop thread with arg when nobody will read the job's
     * outcome (its future was cancelled or the loop is freed), whether fn
     * ran or was skipped: arg then belongs to the executor.  NULL for
     * evl_executor_submit, whose caller owns arg. */
    void (*drop)(void *arg);
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
    else if (j->drop)
        j->drop(j->arg);              /* cancelled: the result goes nowhere */
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

static evl_future *evl__submit(evl_loop *loop, evl_work_fn fn, void *arg, void (*drop)(void *))
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
    j->drop = drop;
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

evl_future *evl_executor_submit(evl_loop *loop, evl_work_fn fn, void *arg)
{
    return evl__submit(loop, fn, arg, NULL);
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
            if (j->drop)
                j->drop(j->arg);
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

/* ---------------------------------------------------------- getaddrinfo
 *
 * asyncio's loop.getaddrinfo: getaddrinfo(3) on the pool.  It lives here,
 * not in io.c, because its request must outlive a cancelled caller: the
 * worker may still be inside getaddrinfo when the task has moved on (its
 * stack reused), so the request is on the heap with copies of the strings,
 * and a job whose future was cancelled frees it (and the answer) through
 * its drop hook. */

_Static_assert(EAI_NONAME < 0 && EAI_SYSTEM < 0 && EAI_MEMORY < 0,
               "evl_getaddrinfo maps glibc's negative EAI_* codes");

typedef struct evl__gai {
    const char *host, *service;     /* copies in strings[]; NULL as given */
    struct addrinfo hints;
    bool has_hints;
    struct addrinfo *res;           /* the answer, until handed over */
    char strings[];                 /* host and service, NUL-terminated */
} evl__gai;

static void evl__gai_free(void *arg)
{
    evl__gai *g = arg;
    if (g->res)
        freeaddrinfo(g->res);
    free(g);
}

static intptr_t evl__gai_run(void *arg)
{
    evl__gai *g = arg;
    errno = 0;
    int rc = getaddrinfo(g->host, g->service, g->has_hints ? &g->hints : NULL, &g->res);
    if (rc == 0)
        return 0;
    g->res = NULL;
    if (rc == EAI_SYSTEM && errno > 0)
        return -errno;
    if (rc == EAI_MEMORY)
        return EVL_ENOMEM;
    if (rc < 0 && rc > -1000)
        return EVL_EAI_BASE + rc;
    return EVL_EAI_BASE + EAI_FAIL;   /* outside the documented range */
}

int evl_getaddrinfo(const char *host, const char *service, const struct addrinfo *hints,
                    struct addrinfo **res)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    if (!res)
        return EVL_EINVAL;
    *res = NULL;
    /* One block: the request and copies of the strings. */
    size_t hlen = host ? strlen(host) + 1 : 0, slen = service ? strlen(service) + 1 : 0;
    evl__gai *g = calloc(1, sizeof(*g) + hlen + slen);
    if (!g)
        return EVL_ENOMEM;
    if (host)
        g->host = memcpy(g->strings, host, hlen);
    if (service)
        g->service = memcpy(g->strings + hlen, service, slen);
    if (hints) {
        /* Only the four fields hints may set (getaddrinfo(3)). */
        g->hints.ai_flags = hints->ai_flags;
        g->hints.ai_family = hints->ai_family;
        g->hints.ai_socktype = hints->ai_socktype;
        g->hints.ai_protocol = hints->ai_protocol;
        g->has_hints = true;
    }
    evl_future *f = evl__submit(t->fut.loop, evl__gai_run, g, evl__gai_free);
    if (!f) {
        evl__gai_free(g);
        return EVL_ENOMEM;
    }
    intptr_t r = evl_await(f);
    if (evl_future_state(f) == EVL_FUTURE_PENDING)
        evl_cancel(f);                /* not expected; the drop then frees g */
    /* The job completed f (DONE): g is ours again, even when this task was
     * cancelled after it woke.  f CANCELLED: the job's drop frees g. */
    if (evl_future_state(f) == EVL_FUTURE_DONE) {
        if (r == 0) {                 /* else an answer we were cancelled after */
            *res = g->res;
            g->res = NULL;
        }
        evl__gai_free(g);
    }
    evl_future_unref(f);
    return (int)r;
}
