/*
 * pipeline.c -- a producer/consumer pipeline built from futures: a bounded
 * queue whose get and put await a future that the other side completes
 * (asyncio.Queue in a few lines), a producer, three consumers, and a timeout
 * (evl_wait_for, asyncio.wait_for): a consumer that gets nothing for 100 ms
 * decides the stream is over and stops.
 *
 * Usage: pipeline [ITEMS]      (default 20; runs on the real clock)
 */
#include "evl.h"

#include <stdio.h>
#include <stdlib.h>

#define CAP 4

/* A bounded FIFO of ints, like asyncio.Queue: a consumer finding it empty
 * parks a future of its own in `getters` and awaits it (with a timeout);
 * put() completes the oldest one.  The producer finding it full parks a
 * future in `putter`, completed by the next get. */
#define MAX_GETTERS 8
struct queue {
    int items[CAP];
    unsigned head, len;
    evl_future *getters[MAX_GETTERS];
    unsigned ngetters;
    evl_future *putter;
};

static void wake(evl_future **f)
{
    if (*f) {
        evl_future_set_result(*f, 0);
        evl_future_unref(*f);
        *f = NULL;
    }
}

static int put(struct queue *q, int v)
{
    while (q->len == CAP) {           /* full: wait until a get makes room */
        q->putter = evl_future_new(NULL);
        evl_future *f = evl_future_ref(q->putter);
        intptr_t r = evl_await(f);
        evl_future_unref(f);
        if (r < 0)
            return (int)r;
    }
    q->items[(q->head + q->len++) % CAP] = v;
    if (q->ngetters) {                /* wake the consumer that waited longest */
        evl_future *g = q->getters[0];
        for (unsigned i = 1; i < q->ngetters; i++)
            q->getters[i - 1] = q->getters[i];
        q->ngetters--;
        wake(&g);
    }
    return 0;
}

/* The value, or an error (EVL_ETIMEDOUT when nothing came in time). */
static intptr_t get(struct queue *q, uint64_t timeout_ns)
{
    while (q->len == 0) {
        if (q->ngetters == MAX_GETTERS)
            return EVL_EBUSY;
        evl_future *mine = evl_future_new(NULL);
        q->getters[q->ngetters++] = evl_future_ref(mine);
        intptr_t r = evl_wait_for(mine, timeout_ns);
        for (unsigned i = 0; i < q->ngetters; i++) {
            if (q->getters[i] == mine) {  /* timed out: still parked */
                for (unsigned k = i + 1; k < q->ngetters; k++)
                    q->getters[k - 1] = q->getters[k];
                q->ngetters--;
                evl_future_unref(mine);
                break;
            }
        }
        evl_future_unref(mine);
        if (r < 0)
            return r;
    }
    int v = q->items[q->head];
    q->head = (q->head + 1) % CAP;
    q->len--;
    wake(&q->putter);
    return v;
}

static struct queue q;
static int nitems = 20;

static intptr_t producer(void *arg)
{
    for (int i = 1; i <= nitems; i++) {
        evl_sleep(EVL_MS(5));         /* items trickle in */
        put(&q, i);
        printf("producer: put %d (queue holds %u)\n", i, q.len);
    }
    printf("producer: done\n");
    return 0;
}

static intptr_t consumer(void *arg)
{
    int id = (int)(intptr_t)arg, n = 0;
    for (;;) {
        intptr_t v = get(&q, EVL_MS(100));
        if (v == EVL_ETIMEDOUT) {
            printf("consumer %d: nothing for 100 ms, stopping after %d items\n", id, n);
            return n;
        }
        if (v < 0)
            return v;
        n++;
        printf("consumer %d: got %ld\n", id, (long)v);
        evl_sleep(EVL_MS(12));        /* slower than the producer: the queue fills */
    }
}

static intptr_t main_task(void *arg)
{
    evl_task *t[4] = {
        evl_spawn(NULL, "producer", producer, NULL),
        evl_spawn(NULL, "consumer-1", consumer, (void *)1),
        evl_spawn(NULL, "consumer-2", consumer, (void *)2),
        evl_spawn(NULL, "consumer-3", consumer, (void *)3),
    };
    intptr_t res[4];
    int rc = evl_gather(t, 4, 0, res);
    printf("consumed %ld items in all\n", (long)(res[1] + res[2] + res[3]));
    for (int i = 0; i < 4; i++)
        evl_future_unref(t[i]);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        nitems = atoi(argv[1]);
    evl_loop *loop = evl_loop_new(NULL);
    if (!loop) {
        perror("evl_loop_new");
        return 1;
    }
    evl_task *m = evl_spawn(loop, "main", main_task, NULL);
    intptr_t r = evl_run_until_complete(loop, m);
    evl_future_unref(m);
    evl_loop_free(loop);
    return r == 0 ? 0 : 1;
}
