/* probes.c -- one USDT semaphore per probe of EVL_PROBE_LIST.  A tracer
 * raises a semaphore when it attaches; while it is 0 the probe site skips
 * even the preparation of its arguments. */
#include "evl-internal.h"

#ifdef EVL_PROBES
#define EVL__SEM_DEF(name, nargs, doc)                                        \
    __extension__ volatile unsigned short evl_##name##_semaphore              \
        __attribute__((unused, section(".probes")));
EVL_PROBE_LIST(EVL__SEM_DEF)
#undef EVL__SEM_DEF
#endif
