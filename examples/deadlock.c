/*
 * deadlock.c -- two tasks that take two locks in opposite orders: each
 * holds one and waits for the other's, and neither can go on.  The classic
 * bank-transfer deadlock, in asyncio's model (evl_lock is asyncio.Lock).
 *
 * `loopscope lint` reports the wait-for cycle (rule deadlock) with both
 * tasks, their functions and the locks; `loopscope graph --kind tasks`
 * draws it in red.  A watchdog in main gives up after --seconds S (default
 * 1) and cancels both, so the program ends: cancelled, each acquire
 * returns EVL_ECANCELED and the task releases the lock it held.
 *
 * Usage: deadlock [--seconds S] [--wait-ms N]  (N: pause before starting,
 * so a tracer can attach by pid).  Prints what happened; exits 0 when the
 * deadlock happened and was broken, 1 otherwise.
 */
#include "evl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct account {
    const char *name;
    evl_lock lock;
    long balance;
};

struct transfer {
    struct account *from, *to;
    long amount;
};

/* Lock the source, then (after a pause in which the other transfer locks
 * its own source) the destination: the second acquire never succeeds. */
static intptr_t transfer(void *arg)
{
    struct transfer *t = arg;
    int rc = evl_lock_acquire(&t->from->lock);
    if (rc < 0)
        return rc;
    rc = evl_sleep(EVL_MS(10));
    if (rc == 0)
        rc = evl_lock_acquire(&t->to->lock);
    if (rc == 0) {
        t->from->balance -= t->amount;
        t->to->balance += t->amount;
        evl_lock_release(&t->to->lock);
    }
    evl_lock_release(&t->from->lock);
    return rc;
}

static double seconds = 1;

static intptr_t main_task(void *arg)
{
    (void)arg;
    struct account a = { .name = "a", .balance = 100 }, b = { .name = "b", .balance = 100 };
    evl_lock_init(&a.lock);
    evl_lock_init(&b.lock);
    struct transfer ab = { &a, &b, 30 }, ba = { &b, &a, 20 };
    evl_task *t1 = evl_spawn(NULL, "transfer_a_to_b", transfer, &ab);
    evl_task *t2 = evl_spawn(NULL, "transfer_b_to_a", transfer, &ba);
    if (!t1 || !t2)
        return EVL_ENOMEM;
    evl_future *both[] = { t1, t2 };
    evl_future *g = evl_gather_new(NULL, both, 2, 0);
    if (!g)
        return EVL_ENOMEM;
    intptr_t rc = evl_wait_for(g, (uint64_t)(seconds * 1e9));
    printf("transfers: %s\n", rc == EVL_ETIMEDOUT ? "deadlocked, cancelled by the watchdog"
                                                   : rc < 0 ? evl_err_name((int)rc) : "done");
    printf("balances: a %ld, b %ld\n", a.balance, b.balance);
    evl_future_unref(g);
    return rc == EVL_ETIMEDOUT ? 0 : 1;
}

int main(int argc, char **argv)
{
    long wait_ms = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            seconds = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--wait-ms") && i + 1 < argc) {
            wait_ms = atol(argv[++i]);
        } else {
            fprintf(stderr, "usage: deadlock [--seconds S] [--wait-ms N]\n");
            return 2;
        }
    }
    if (!(seconds > 0 && seconds < 1e6)) {
        fprintf(stderr, "deadlock: --seconds must be positive\n");
        return 2;
    }
    if (wait_ms > 0)
        usleep((useconds_t)wait_ms * 1000);
    evl_loop *loop = evl_loop_new(NULL);
    if (!loop)
        return 1;
    evl_task *m = evl_spawn(loop, "main", main_task, NULL);
    intptr_t rc = m ? evl_run_until_complete(loop, m) : 1;
    evl_loop_free(loop);
    return rc == 0 ? 0 : 1;
}
