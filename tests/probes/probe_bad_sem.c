/* probe_bad_sem.c -- the part of probe_bad (see probe_bad.c) with a semaphore. */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

void probe_bad_create(int argc);

__extension__ volatile unsigned short evl_task_create_semaphore
    __attribute__((unused, section(".probes")));

void probe_bad_create(int argc)
{
    if (evl_task_create_semaphore)
        STAP_PROBE3(evl, task_create, 1, argc, 3);
}
