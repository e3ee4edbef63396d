/*
 * pipeline.c -- a producer/consumer pipeline: an evl_queue of 4 items
 * (asyncio.Queue(maxsize=4)), a producer, three consumers, and a timeout
 * scope (asyncio.timeout): a consumer that gets nothing for 100 ms decides
 * the stream is over and stops.
 *
 * Recorded, every get that waits is a suspend with reason queue_get and
 * the put that ends it a wake by the producer (waker kind queue);
 * `loopscope graph --kind tasks` draws those as green "woken by" edges from
 * each consumer to the producer, and the producer's waits on the full
 * queue (queue_put) back the other way.
 *
 * Usage: pipeline [ITEMS]      (default 20; runs on the real clock)
 */
#include "evl.h"

#include <stdio.h>
#include <stdlib.h>

#define CAP 4

static evl_queue q;
static int nitems = 20;

static intptr_t producer(void *arg)
{
    (void)arg;
    for (int i = 1; i <= nitems; i++) {
        evl_sleep(EVL_MS(5));         /* items trickle in */
        int rc = evl_queue_put(&q, i); /* waits while the queue is full */
        if (rc < 0)
            return rc;
        printf("producer: put %d (queue holds %zu)\n", i, evl_queue_qsize(&q));
    }
    printf("producer: done\n");
    return 0;
}

/* The next item, or EVL_ETIMEDOUT when none came within timeout_ns
 * (async with asyncio.timeout(...): await q.get()). */
static intptr_t get(uint64_t timeout_ns)
{
    evl_timeout tm;
    intptr_t item = 0, r = evl_timeout_enter(&tm, timeout_ns);
    if (r == 0) {
        r = evl_queue_get(&q, &item);
        r = evl_timeout_exit(&tm, r);
    }
    return r < 0 ? r : item;
}

static intptr_t consumer(void *arg)
{
    int id = (int)(intptr_t)arg, n = 0;
    for (;;) {
        intptr_t v = get(EVL_MS(100));
        if (v == EVL_ETIMEDOUT) {
            printf("consumer %d: nothing for 100 ms, stopping after %d items\n", id, n);
            return n;
        }
        if (v < 0)
            return v;
        n++;
        printf("consumer %d: got %ld\n", id, (long)v);
        evl_sleep(EVL_MS(30));        /* three of them are slower than the producer: the queue fills */
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
    evl_queue_init(&q, EVL_QUEUE_FIFO, CAP);
    evl_loop *loop = evl_loop_new(NULL);
    if (!loop) {
        perror("evl_loop_new");
        return 1;
    }
    evl_task *m = evl_spawn(loop, "main", main_task, NULL);
    intptr_t r = evl_run_until_complete(loop, m);
    evl_future_unref(m);
    evl_loop_free(loop);
    evl_queue_destroy(&q);
    return r == 0 ? 0 : 1;
}
