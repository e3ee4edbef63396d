/*
 * test-trace-buffers.c -- the batches a loop keeps for a tracer that reads
 * them after the probe has returned (loop/include/evl-probes.h,
 * "batching"; loop/src/trace.c, "the buffers").  The batch semaphore is
 * raised by hand, and the test writes the tracer's words (reader,
 * released) itself, as a recorder would.
 */
#define _GNU_SOURCE
#include "task.h"
#include "evl-internal.h"

#ifdef EVL_PROBES
static void put(evl_loop *loop, uint64_t task, int n)
{
    for (int i = 0; i < n; i++)
        evl__trace_rec(loop, EVL_PROBE_ID_task_run, sizeof(struct evl_rec), task, 0, 0, 0);
}

static uint64_t first_task(const uint8_t *buf)
{
    return ((const struct evl_rec *)(const void *)buf)->task;
}

static uint8_t *slot(evl_loop *loop, uint32_t k)
{
    return loop->trace_ring + (size_t)k * EVL_BATCH_BYTES;
}
#endif

TEST_IMPL(trace_buffers_kept)
{
#ifdef EVL_PROBES
    evl_batch_semaphore++;                    /* as a tracer would */
    evl_loop *loop = test_loop(0, 0);
    ASSERT_NOT_NULL(loop->trace_ring);        /* batching on from the start */
    ASSERT_PTR_EQ(loop->trace_buf, slot(loop, 0));

    /* No reader yet: every batch is a copy (seq 0), the buffer reused. */
    put(loop, 1, 3);
    evl__trace_hand_over(loop);
    ASSERT_EQ(loop->trace_seq, 0);
    ASSERT_PTR_EQ(loop->trace_buf, slot(loop, 0));
    ASSERT_EQ(loop->trace_len, 0);

    /* A reader: each batch is kept, numbered, and the loop moves on to the
     * lowest free buffer. */
    loop->pub.reader = 1;
    for (uint32_t i = 1; i <= EVL_BATCH_BUFS; i++) {
        ASSERT_PTR_EQ(loop->trace_buf, slot(loop, (i - 1) % EVL_BATCH_BUFS));
        put(loop, 100 + i, 2);
        evl__trace_hand_over(loop);
        ASSERT_EQ(loop->trace_seq, i);
        ASSERT_EQ(loop->trace_len, 0);
    }
    /* Every buffer held (released is still 0): records go to the spill,
     * the kept batches stay as they were. */
    ASSERT_PTR_EQ(loop->trace_buf, loop->trace_spill);
    for (uint32_t i = 1; i <= EVL_BATCH_BUFS; i++)
        ASSERT_U64_EQ(first_task(slot(loop, i - 1)), 100 + i);

    /* Handed over with no buffer free: dropped, counted, and an empty
     * batch with the last seq (no new one). */
    put(loop, 7, 5);
    evl__trace_hand_over(loop);
    ASSERT_EQ(loop->pub.lost, 5);
    ASSERT_EQ(loop->trace_seq, EVL_BATCH_BUFS);
    ASSERT_PTR_EQ(loop->trace_buf, loop->trace_spill);
    ASSERT_EQ(loop->trace_len, 0);

    /* The tracer frees the first ten: the spill's records move into the
     * lowest free buffer (slot 0, batch 1's) and go out as the next batch;
     * the loop goes on in slot 1 (batch 2's). */
    loop->pub.released = 10;
    put(loop, 999, 3);
    evl__trace_hand_over(loop);
    ASSERT_EQ(loop->trace_seq, EVL_BATCH_BUFS + 1);
    ASSERT_EQ(loop->pub.lost, 5);
    ASSERT_U64_EQ(first_task(slot(loop, 0)), 999);
    ASSERT_PTR_EQ(loop->trace_buf, slot(loop, 1));
    ASSERT_U64_EQ(first_task(slot(loop, 10)), 111);   /* batch 11: still held */

    /* A released word that lies (ahead of the loop) frees only the loop's
     * own buffers, for the loop to write into again: it only compares it. */
    loop->pub.released = loop->trace_seq + 1000;
    put(loop, 5, 1);
    evl__trace_hand_over(loop);
    ASSERT_PTR_EQ(loop->trace_buf, slot(loop, 0));

    /* All read: nothing to wait for when the loop is freed. */
    loop->pub.released = loop->trace_seq;
    evl_batch_semaphore--;
    ASSERT_LOOP_FREE(loop, 0);
#endif
    return 0;
}

/* Batching starts afresh (the semaphore rose from 0): every buffer free
 * and no reader until the new tracer says so; it stops with every batch
 * read: the buffers are unmapped. */
TEST_IMPL(trace_buffers_attach_detach)
{
#ifdef EVL_PROBES
    evl_loop *loop = test_loop(0, 0);
    ASSERT_NULL(loop->trace_ring);            /* never traced: nothing mapped */
    loop->pub.released = 77;                  /* left by some earlier tracer */
    loop->pub.reader = 1;
    evl_batch_semaphore++;
    evl__trace_check_attach(loop);            /* as after a poll */
    ASSERT_NOT_NULL(loop->trace_ring);
    ASSERT_EQ(loop->pub.reader, 0);
    ASSERT_EQ(loop->pub.released, loop->trace_seq);
    loop->pub.reader = 1;
    put(loop, 1, 1);
    evl__trace_hand_over(loop);               /* batch 1, held */
    ASSERT_EQ(loop->trace_seq, 1);
    evl_batch_semaphore--;
    evl__trace_check_attach(loop);            /* detached, batch 1 unread: kept */
    ASSERT_NOT_NULL(loop->trace_ring);
    ASSERT_U64_EQ(first_task(slot(loop, 0)), 1);
    evl_batch_semaphore++;
    evl__trace_check_attach(loop);            /* the next tracer: all free again */
    ASSERT_EQ(loop->pub.released, 1);
    loop->pub.reader = 1;
    put(loop, 2, 1);
    evl__trace_hand_over(loop);
    loop->pub.released = loop->trace_seq;     /* read */
    evl_batch_semaphore--;
    evl__trace_check_attach(loop);
    ASSERT_NULL(loop->trace_ring);            /* all read: unmapped */
    ASSERT_LOOP_FREE(loop, 0);
#endif
    return 0;
}
