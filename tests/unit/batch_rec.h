/*
 * batch_rec.h -- reading the loop's batch buffer in a unit test: what a
 * tracer would be handed (the test raises the batch semaphore by hand).
 * Needs evl-internal.h and task.h before it.
 */
#ifndef EVL_UNIT_BATCH_REC_H
#define EVL_UNIT_BATCH_REC_H

#ifdef EVL_PROBES
/* The last record of `kind` for `task` still in loop's batch buffer, or
 * NULL. */
static inline const struct evl_rec *last_rec(evl_loop *loop, int kind, uint64_t task)
{
    const struct evl_rec *found = NULL;
    for (uint32_t off = 0; off < loop->trace_len;) {
        const struct evl_rec *r = (const struct evl_rec *)(const void *)(loop->trace_buf + off);
        ASSERT_GT(r->size, 0);
        if (r->kind == kind && r->task == task)
            found = r;
        off += r->size;
    }
    return found;
}
#endif

#endif /* EVL_UNIT_BATCH_REC_H */
