/*
 * cmd_diff.c -- `loopscope diff BEFORE AFTER`: what changed between two
 * recordings of the same service (work in progress).
 */
#include "commands.h"
#include "trace.h"

#include <stdio.h>

static const char usage[] =
    "usage: loopscope diff BEFORE AFTER [--json] [--svg FILE]\n"
    "\n"
    "example: loopscope diff before.db after.db\n";

int cmd_diff(int argc, char **argv)
{
    const char *before, *after = NULL;
    bool json = false;
    int rc = ls_parse_common(argc, argv, usage, &before, &json, NULL, &after);
    if (rc)
        return rc;
    if (!after) {
        fprintf(stderr, "error: diff: two traces needed\nsee 'loopscope diff --help'\n");
        return 2;
    }
    ls_trace *a = ls_trace_open(before);
    if (!a)
        return 1;
    ls_trace *b = ls_trace_open(after);
    if (!b) {
        ls_trace_close(a);
        return 1;
    }
    ls_trace_close(a);
    ls_trace_close(b);
    return 0;
}
