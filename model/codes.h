/*
 * codes.h -- the trace model's codes that are not libevl's.  libevl's own
 * (event kinds = probe ids, suspend reasons, waker kinds, states, leak
 * kinds) are in loop/include/evl-probes.h; these are the recorder's.  Every
 * code stored in a trace comes from one of these X-macro lists or from
 * evl-probes.h: C uses the enums, SQL text uses the LS_SQL_* string
 * constants that gen_codes.c writes into ls_codes.h, and the lookup tables
 * of a trace (event_kinds, states, ...) are filled from the same lists.
 */
#ifndef LS_MODEL_CODES_H
#define LS_MODEL_CODES_H

/* blocking.kind */
#define LS_BLOCKING_KIND_LIST(XX)                                             \
    XX(OFFCPU, 1, "off-cpu")      /* the thread slept outside its wait call */ \
    XX(ONCPU, 2, "on-cpu")        /* a step ran longer than the threshold on CPU */

/* blocking_victims.cause: why a delayed task was due during the episode */
#define LS_VICTIM_CAUSE_LIST(XX)                                              \
    XX(READY, 1, "ready")         /* it was on the ready queue */             \
    XX(TIMER, 2, "timer")         /* its timer came due */                    \
    XX(FD, 3, "fd")               /* its fd was ready for the first poll after it */

enum ls_blocking_kind {
#define LS__BK(n, v, s) LS_BLOCK_##n = v,
    LS_BLOCKING_KIND_LIST(LS__BK)
#undef LS__BK
};

enum ls_victim_cause {
#define LS__VC(n, v, s) LS_CAUSE_##n = v,
    LS_VICTIM_CAUSE_LIST(LS__VC)
#undef LS__VC
};

#endif
