/*
 * debug.c -- the live loops of the process, for a debugger that reads them
 * from outside (`loopscope ps`): the global `evl_debug` (evl-probes.h)
 * holds the first loop and the offsets of the loop's and the task's
 * fields; loops are linked through dbg_next as they are made and freed.
 * Writers take the mutex; `generation` is odd while the list changes.
 */
#include "evl-internal.h"

#include <pthread.h>
#include <stddef.h>

__attribute__((visibility("default"), used)) struct evl_debug evl_debug = {
    .magic = EVL_DEBUG_MAGIC,
    .version = EVL_DEBUG_VERSION,
    .size = sizeof(struct evl_debug),
    .loop_next = offsetof(struct evl_loop, dbg_next),
    .loop_id = offsetof(struct evl_loop, id),
    .loop_tid = offsetof(struct evl_loop, tid),
    .loop_tasks = offsetof(struct evl_loop, tasks),
    .loop_ntasks = offsetof(struct evl_loop, ntasks),
    .loop_current = offsetof(struct evl_loop, current),
    .loop_pub = offsetof(struct evl_loop, pub),
    .task_next = offsetof(struct evl__task, next),
    .task_id = offsetof(struct evl__task, id),
    .task_parent = offsetof(struct evl__task, parent_id),
    .task_fn = offsetof(struct evl__task, fn),
    .task_name = offsetof(struct evl__task, name),
    .task_name_size = sizeof(((struct evl__task *)0)->name),
    .task_state = offsetof(struct evl__task, tstate),
    .task_ncancels = offsetof(struct evl__task, ncancels),
    .task_reason = offsetof(struct evl__task, wait_reason),
    .task_object = offsetof(struct evl__task, wait_obj),
    .task_timeout = offsetof(struct evl__task, wait_timeout),
    .task_since = offsetof(struct evl__task, wait_since),
    .task_loop = offsetof(struct evl__task, fut) + offsetof(evl_future, loop),
    .task_sp = offsetof(struct evl__task, sp),
};

static pthread_mutex_t debug_mu = PTHREAD_MUTEX_INITIALIZER;

void evl__debug_add(evl_loop *loop)
{
    pthread_mutex_lock(&debug_mu);
    __atomic_add_fetch(&evl_debug.generation, 1, __ATOMIC_RELEASE);
    evl_loop *head = (evl_loop *)(uintptr_t)evl_debug.loops;
    loop->dbg_prev = NULL;
    loop->dbg_next = head;
    if (head)
        head->dbg_prev = loop;
    __atomic_store_n(&evl_debug.loops, (__u64)(uintptr_t)loop, __ATOMIC_RELEASE);
    __atomic_add_fetch(&evl_debug.generation, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&debug_mu);
}

void evl__debug_remove(evl_loop *loop)
{
    pthread_mutex_lock(&debug_mu);
    __atomic_add_fetch(&evl_debug.generation, 1, __ATOMIC_RELEASE);
    if (loop->dbg_prev)
        loop->dbg_prev->dbg_next = loop->dbg_next;
    else
        __atomic_store_n(&evl_debug.loops, (__u64)(uintptr_t)loop->dbg_next, __ATOMIC_RELEASE);
    if (loop->dbg_next)
        loop->dbg_next->dbg_prev = loop->dbg_prev;
    loop->dbg_prev = loop->dbg_next = NULL;
    __atomic_add_fetch(&evl_debug.generation, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&debug_mu);
}
