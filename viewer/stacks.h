/*
 * stacks.h -- a trace's stacks (tables stacks, frames) as the commands
 * print them, and the await chains of an asyncio trace's tasks (table
 * await_stacks: the chain a census saw at each task_suspend;
 * tracer/SCHEMA.md): `blocking`'s episode stacks, `tasks --stacks`, lint's
 * deadlock rule.  Depends on trace.h and output.h; the application-frame
 * rule is trace.c's app_frames view (ls_create_app_frames, which must have
 * run first).
 */
#ifndef LOOPSCOPE_STACKS_H
#define LOOPSCOPE_STACKS_H

#include "output.h"
#include "trace.h"

#include <stdbool.h>
#include <stdint.h>

enum ls_stack_order {
    /* blocking's: the application frames first, innermost first, then a
     * "-- system and runtime|libevl frames --" line and the others */
    LS_STACK_APP_FIRST,
    /* an await chain's: innermost first, each application frame marked
     * with '>' in its indentation */
    LS_STACK_IN_ORDER,
};

/* Print stack's frames, one line each (function padded to 28 columns, then
 * file:line with the file's last two components, or the module when there
 * is no file; every string escaped by ls_term), indented 6; or, with j, as
 * a JSON array under key of {function, file, line, module, application}
 * in that order.  generic: a generic loop mode trace (the separator line's
 * wording). */
void ls_stack_print(ls_trace *t, int64_t stack, ls_json *j, const char *key, bool generic,
                    enum ls_stack_order order);

/* Why a trace has no await chains, one phrase ("this is a libevl trace ..."); NULL
 * when it has them: an asyncio trace with a census lifecycle
 * (ls_lifecycle_source) and the await_stacks table (traces recorded before
 * it lack it). */
const char *ls_await_none(ls_trace *t);

/* A statement for ls_await_stack (finalize it), or NULL after an error. */
sqlite3_stmt *ls_await_prepare(ls_trace *t);
/* The stacks row of the await chain a census recorded for task's suspend
 * at ts (its task_suspend event's time); -1 when there is none (the chain
 * could not be read, or no such suspend). */
int64_t ls_await_stack(sqlite3_stmt *st, int64_t task, int64_t ts);

#endif
