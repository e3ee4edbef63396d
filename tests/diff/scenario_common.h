/*
 * scenario_common.h -- what every file of diff_scenarios shares
 * (scenario_common.c): the output conventions of py/common.py and the
 * few calls that cannot fail in a correct run.
 *
 * Output: one line per event; a result prints as its number, an error as
 * "error", a cancellation as "cancelled", a timeout as "timeout"; Python's
 * True/False as True/False.  A call that fails where it cannot exits 2
 * with its name on stderr, which fails the scenario.
 */
#ifndef DIFF_SCENARIO_COMMON_H
#define DIFF_SCENARIO_COMMON_H

#include "evl.h"
#include <stdint.h>

#define IARG(x) ((void *)(intptr_t)(x))
#define AINT(p) ((int)(intptr_t)(p))

/* One line of output, flushed (the other side's lines interleave). */
void say(const char *format, ...) __attribute__((format(printf, 1, 2)));
/* common.py's fmt(): one of a few rotating buffers, so that several can
 * appear in one say(). */
const char *str_of(intptr_t r);
/* common.py's state(). */
const char *tstate(const evl_task *t);
static inline const char *tf(int b) { return b ? "True" : "False"; }
/* prefix, then the results space separated. */
void say_results(const char *prefix, const intptr_t *res, size_t n);

void must(long rc, const char *what);
#define MUST(call) must((call), #call)
void *must_ptr(void *p, const char *what);
/* evl_spawn on the current loop. */
evl_task *spawn(const char *name, evl_task_fn fn, void *arg);
/* Await t, then drop the caller's reference. */
intptr_t await_drop(evl_task *t);
/* common.py's ticker(): "tick i" once per loop iteration, AINT(arg) times. */
intptr_t ticker(void *arg);

#endif
