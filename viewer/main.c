/*
 * main.c -- the `loopscope` CLI: one command table, one file per command
 * (git's git.c commands[] / builtin.h).  viewer/README.md lists them.
 */
#include "commands.h"
#include "tracer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmd_help(int argc, char **argv);

static const struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} commands[] = {
    { "record", cmd_record,
      "attach to (or start) an event-loop process, libevl or any epoll loop, and record a trace" },
    { "agent", cmd_agent,
      "watch a host's loop processes: a flight recorder each, capped trace dir, /metrics" },
    { "top", cmd_top, "live view of a running program: loop lag, tasks, blocking as it occurs" },
    { "ps", cmd_ps, "snapshot of a running CPython's asyncio tasks: state, waits, await tree, cycles" },
    { "info", cmd_info, "what a trace holds: target, duration, tasks, events, drops" },
    { "tasks", cmd_tasks, "one row per task: state, busy/scheduled/idle time, steps, wakes" },
    { "timeline", cmd_timeline, "swimlanes per task (running, ready, suspended, blocking); --svg" },
    { "blocking", cmd_blocking, "blocking episodes: call site, stack, delayed tasks; totals" },
    { "graph", cmd_graph, "Graphviz graphs: blocking call graph, task tree, lifecycle diagram" },
    { "export", cmd_export,
      "export for ui.perfetto.dev: Perfetto's protobuf trace (default) or Chrome trace JSON" },
    { "diff", cmd_diff, "what changed between two traces: blocking sites, tasks, latency, leaks" },
    { "lint", cmd_lint, "warnings with evidence: blocking, leaks, lost wakeups, late timers" },
    { "sql", cmd_sql, "run SQL on a trace" },
    { "help", cmd_help, "list commands, or show one command's help" },
};

static const struct command *find_command(const char *name)
{
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: loopscope COMMAND [ARGS...]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'loopscope COMMAND --help' shows a command's options.\n");
}

static int cmd_help(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--help") != 0 && strcmp(argv[1], "-h") != 0) {
        const struct command *c = find_command(argv[1]);
        if (!c) {
            fprintf(stderr, "error: unknown command '%s'\n", argv[1]);
            return 2;
        }
        char *args[] = { argv[1], "--help", NULL };
        return c->fn(2, args);
    }
    usage(stdout);
    return 0;
}

/* Output is checked once, on the way out (ls_finish_stdout, options.c):
 * at main's return, and for commands that call exit() (record's --help),
 * by the atexit handler. */
int main(int argc, char **argv)
{
    atexit(ls_check_stdout_at_exit);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
        return ls_finish_stdout(cmd_help(1, argv));
    if (strcmp(argv[1], "--version") == 0) {
        printf("loopscope %s\n", LOOPSCOPE_VERSION);
        return ls_finish_stdout(0);
    }
    const struct command *c = find_command(argv[1]);
    if (!c) {
        fprintf(stderr, "error: unknown command '%s' (see 'loopscope help')\n", argv[1]);
        return 2;
    }
    return ls_finish_stdout(c->fn(argc - 1, argv + 1));
}
