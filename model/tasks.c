/*
 * tasks.c -- the replay's bounded table of live tasks (tasks.h).  Open
 * addressing with linear probing, kept at most half full, and deletion by
 * backward shift (no tombstones), so a target that creates and finishes
 * millions of tasks leaves the table as small as its live set.
 */
#include "tasks.h"

#include <stdlib.h>

struct ls_tasks {
    ls_task *slot;
    size_t cap;               /* power of two, or 0 */
    size_t n;                 /* live entries */
    size_t max_live;
    ls_task *last;            /* the entry found last: a task's events come
                                 in runs (a step's run, then its suspend;
                                 checked by id, so moves and removals
                                 leave it safe) */
};

static size_t home_slot(uint64_t id, size_t cap)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
}

ls_tasks *ls_tasks_new(size_t max_live)
{
    ls_tasks *t = calloc(1, sizeof(*t));
    if (t)
        t->max_live = max_live;
    return t;
}

void ls_tasks_free(ls_tasks *t)
{
    if (t)
        free(t->slot);
    free(t);
}

static int grow(ls_tasks *t)
{
    size_t cap = t->cap ? t->cap * 2 : 1024;
    ls_task *a = calloc(cap, sizeof(*a));
    if (!a)
        return -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->slot[i].id)
            continue;
        size_t k = home_slot(t->slot[i].id, cap);
        while (a[k].id)
            k = (k + 1) & (cap - 1);
        a[k] = t->slot[i];
    }
    free(t->slot);
    t->slot = a;
    t->cap = cap;
    t->last = NULL;
    return 0;
}

ls_task *ls_tasks_find(ls_tasks *t, uint64_t id)
{
    if (!t->cap || !id)
        return NULL;
    if (t->last && t->last->id == id)
        return t->last;
    for (size_t k = home_slot(id, t->cap);; k = (k + 1) & (t->cap - 1)) {
        if (t->slot[k].id == id)
            return t->last = &t->slot[k];
        if (!t->slot[k].id)
            return NULL;
    }
}

ls_task *ls_tasks_get(ls_tasks *t, uint64_t id, uint64_t loop, bool *made)
{
    *made = false;
    ls_task *e = ls_tasks_find(t, id);
    if (e || !id)
        return e;
    if (t->n >= t->max_live)
        return NULL;
    if ((t->n + 1) * 2 > t->cap && grow(t) < 0)
        return NULL;
    size_t k = home_slot(id, t->cap);
    while (t->slot[k].id)
        k = (k + 1) & (t->cap - 1);
    t->slot[k] = (ls_task){ .id = id, .loop = loop };
    t->n++;
    *made = true;
    return &t->slot[k];
}

void ls_tasks_remove(ls_tasks *t, ls_task *task)
{
    size_t mask = t->cap - 1, i = (size_t)(task - t->slot), j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!t->slot[j].id)
            break;
        size_t k = home_slot(t->slot[j].id, t->cap);
        /* Entry j may move into the hole at i unless its home lies
         * cyclically in (i, j]. */
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            t->slot[i] = t->slot[j];
            i = j;
        }
    }
    t->slot[i].id = 0;
    t->n--;
}


void ls_tasks_each(ls_tasks *t, void (*fn)(ls_task *, void *), void *arg)
{
    for (size_t i = 0; i < t->cap; i++)
        if (t->slot[i].id)
            fn(&t->slot[i], arg);
}
