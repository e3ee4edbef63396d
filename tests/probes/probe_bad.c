/*
 * probe_bad -- a program whose "evl" USDT probes break EVL_PROBE_LIST on
 * purpose, for the negative self-test of probe_note_check:
 *   evl:task_create  3 arguments instead of 5 (with a semaphore; in
 *                    probe_bad_sem.c, since sys/sdt.h decides about
 *                    semaphores once per translation unit)
 *   evl:task_run     a RIP-relative memory operand, and no semaphore
 *   evl:bogus        a probe the table does not list
 *   every other probe of the table is missing.
 * Built without libevl and with sys/sdt.h's default operand constraint.
 */
#include <sys/sdt.h>

void probe_bad_create(int argc);

long global_counter = 42;

int main(int argc, char **argv)
{
    (void)argv;
    probe_bad_create(argc);
    STAP_PROBE2(evl, task_run, global_counter, argc);
    STAP_PROBE1(evl, bogus, argc);
    return 0;
}
