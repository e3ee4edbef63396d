/* probes.c -- one USDT semaphore per probe of EVL_PROBE_LIST.  A tracer
 * raises a semaphore when it attaches; while it is 0 the probe site skips
 * even the preparation of its arguments.
 *
 * The semaphores are defined here in assembly rather than as C variables
 * so that their placement is ours: one 32-byte block of `.probes`,
 * evl__semaphores, 2 bytes a probe in table order, zero padding after.
 * evl__trace_refresh (trace.h) ORs the block as four 8-byte words, which
 * is what lets the loop refresh its `tracing` byte at every iteration:
 * 14 separate C variables cost 14 loads and ORs, and the compiler may lay
 * them out anywhere.  Each probe's semaphore keeps its own symbol,
 * evl_NAME_semaphore, which the probe's note refers to. */
#include "evl-internal.h"

#ifdef EVL_PROBES
_Static_assert(EVL_PROBE_ID_COUNT - 1 <= 16, "the semaphores must fit evl__semaphores");

#define EVL__SEM_ASM(name, nargs, doc)                                        \
    ".globl evl_" #name "_semaphore\n"                                        \
    ".type evl_" #name "_semaphore, @object\n"                                \
    ".size evl_" #name "_semaphore, 2\n"                                      \
    "evl_" #name "_semaphore: .2byte 0\n"
__asm__(".pushsection .probes, \"aw\", @progbits\n"
        ".balign 32\n"
        ".globl evl__semaphores\n"
        ".hidden evl__semaphores\n"
        ".type evl__semaphores, @object\n"
        ".size evl__semaphores, 32\n"
        "evl__semaphores:\n"
        EVL_PROBE_LIST(EVL__SEM_ASM)
        ".balign 32\n"
        ".popsection\n");
#undef EVL__SEM_ASM

/* The gate (evl-probes.h, "batching"): probe evl_gate:batch, one site that
 * never runs, whose semaphore is batch's.  A tracer that attaches to it
 * after its program on `batch` raises the batch semaphore by one once that
 * program is in place (the kernel counts a semaphore once per probe site,
 * not per tracer), and the loop takes the rise for a snapshot request.  It
 * is not in EVL_PROBE_LIST: it fires nothing and has no id. */
__asm__(".globl evl_gate_batch_semaphore\n"
        ".set evl_gate_batch_semaphore, evl_batch_semaphore\n");
extern volatile unsigned short evl_gate_batch_semaphore;

static __attribute__((used, noinline, cold)) void evl__gate(void)
{
    STAP_PROBE(evl_gate, batch);
}
#endif
